package dashboard

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Latency history defaults (LatencyConfig's zero values).
const (
	// DefaultSampleInterval is how often the histograms are read: fine
	// enough for a chart of an hour, cheap (a Gather of a handful of
	// collectors).
	DefaultSampleInterval = 10 * time.Second
	// DefaultWindow is the span each point's quantiles cover, like
	// PromQL's histogram_quantile over rate(…[1m]): long enough that a
	// few activations a minute make a point, short enough to show a
	// change within a minute.
	DefaultWindow = time.Minute
	// DefaultSamples bounds the ring: an hour at DefaultSampleInterval.
	DefaultSamples = 360
)

// LatencySeries names one histogram the chart draws.
type LatencySeries struct {
	// Metric is the histogram's name, e.g.
	// "ate_router_activation_wait_seconds"; its label sets are summed.
	Metric string
	// Title is the chart's heading.
	Title string
}

// The histograms the dashboard charts (internal/metrics).
const (
	// MetricActivationWait is how long requests waited for their actor
	// (the router's; only where a router runs in the process).
	MetricActivationWait = "ate_router_activation_wait_seconds"
	// MetricResume is how long a resume took from worker claim to
	// RUNNING (the lifecycle's).
	MetricResume = "ate_lifecycle_resume_seconds"
)

// DefaultLatencySeries returns the series charted when
// LatencyConfig.Series is empty: the activation wait and the resume.
func DefaultLatencySeries() []LatencySeries {
	return []LatencySeries{
		{Metric: MetricActivationWait, Title: "Activation wait (router: resumed and joined requests)"},
		{Metric: MetricResume, Title: "Resume (lifecycle: worker claim to RUNNING)"},
	}
}

// LatencyConfig configures a LatencyHistory; zero fields take the
// Default* values.
type LatencyConfig struct {
	// Gatherer holds the histograms (a registry of metrics.Metrics'
	// collectors). Nil: no metrics; the chart says so.
	Gatherer       prometheus.Gatherer
	Series         []LatencySeries
	SampleInterval time.Duration
	Window         time.Duration
	Samples        int
}

// LatencyHistory keeps a bounded ring of cumulative histogram samples
// and turns them into p50/p95 points over time. Safe for concurrent use.
type LatencyHistory struct {
	cfg LatencyConfig

	mu sync.Mutex
	// ring holds the samples, oldest first, at most cfg.Samples; guarded
	// by mu.
	ring []sample
	// dropped is set once the ring has dropped a sample (so an old
	// baseline is no longer the process's zero); guarded by mu.
	dropped bool
}

// sample is every series' cumulative histogram at one time.
type sample struct {
	t     time.Time
	hists map[string]hist
}

// hist is a cumulative histogram summed over label sets: counts[i]
// observations ≤ bounds[i] seconds, count in all (+Inf included).
type hist struct {
	bounds []float64
	counts []uint64
	count  uint64
}

// Point is one chart point: the quantiles, in milliseconds, of the
// observations in the Window ending at T. N is their number; a point
// with N == 0 has no quantiles (a gap in the chart).
type Point struct {
	T        time.Time
	P50, P95 float64
	N        uint64
}

// SeriesPoints is one series' points, oldest first.
type SeriesPoints struct {
	LatencySeries
	Points []Point
	// Missing is set when the gatherer has no such histogram (e.g. the
	// router's in `ate apiserver`, which runs no router).
	Missing bool
}

// NewLatencyHistory returns a history over cfg, defaults applied.
func NewLatencyHistory(cfg LatencyConfig) *LatencyHistory {
	if len(cfg.Series) == 0 {
		cfg.Series = DefaultLatencySeries()
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = DefaultSampleInterval
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Samples <= 0 {
		cfg.Samples = DefaultSamples
	}
	return &LatencyHistory{cfg: cfg}
}

// Enabled reports whether there are metrics to chart.
func (h *LatencyHistory) Enabled() bool { return h != nil && h.cfg.Gatherer != nil }

// Window is the span each point covers.
func (h *LatencyHistory) Window() time.Duration { return h.cfg.Window }

// Span is the time the ring covers when full.
func (h *LatencyHistory) Span() time.Duration {
	return time.Duration(h.cfg.Samples) * h.cfg.SampleInterval
}

// Start samples every SampleInterval until ctx ends, then returns nil.
// A failed Gather is skipped (the chart shows a gap). Without a
// gatherer it just waits for ctx.
func (h *LatencyHistory) Start(ctx context.Context) error {
	if !h.Enabled() {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(h.cfg.SampleInterval)
	defer t.Stop()
	for {
		_ = h.Sample(time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sample reads the histograms now and adds them to the ring, dropping the
// oldest sample beyond Samples. Errors: the gatherer's.
func (h *LatencyHistory) Sample(now time.Time) error {
	s, err := h.gather(now)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ring = append(h.ring, s)
	if over := len(h.ring) - h.cfg.Samples; over > 0 {
		h.ring = slices.Delete(h.ring, 0, over)
		h.dropped = true
	}
	return nil
}

// Points returns each series' points: one per sample in the ring, plus
// one for now read afresh (so the chart shows an activation at once,
// not at the next sample). Errors: the gatherer's.
func (h *LatencyHistory) Points(now time.Time) ([]SeriesPoints, error) {
	if !h.Enabled() {
		return nil, nil
	}
	cur, err := h.gather(now)
	if err != nil {
		return nil, fmt.Errorf("read latency histograms: %w", err)
	}
	h.mu.Lock()
	ring := append(slices.Clone(h.ring), cur)
	dropped := h.dropped
	h.mu.Unlock()

	out := make([]SeriesPoints, 0, len(h.cfg.Series))
	for _, ser := range h.cfg.Series {
		sp := SeriesPoints{LatencySeries: ser}
		if _, ok := cur.hists[ser.Metric]; !ok {
			sp.Missing = true
			out = append(out, sp)
			continue
		}
		for i, s := range ring {
			end := s.hists[ser.Metric]
			base, ok := baseline(ring[:i], s.t.Add(-h.cfg.Window), ser.Metric, dropped)
			if !ok {
				continue
			}
			d := end.minus(base)
			p := Point{T: s.t, N: d.count}
			if d.count > 0 {
				p.P50, p.P95 = 1000*d.quantile(0.5), 1000*d.quantile(0.95)
			}
			sp.Points = append(sp.Points, p)
		}
		out = append(out, sp)
	}
	return out, nil
}

// baseline is the histogram of metric to subtract for a window starting
// at from: the latest earlier sample at or before from; before any such
// sample, the process's start (all zero) if the ring still holds its
// first sample, else the oldest sample. ok is false when earlier holds
// nothing to subtract from and the ring has dropped samples.
func baseline(earlier []sample, from time.Time, metric string, dropped bool) (hist, bool) {
	for i := len(earlier) - 1; i >= 0; i-- {
		if !earlier[i].t.After(from) {
			return earlier[i].hists[metric], true
		}
	}
	if !dropped {
		return hist{}, true
	}
	if len(earlier) == 0 {
		return hist{}, false
	}
	return earlier[0].hists[metric], true
}

// gather reads the configured histograms, each summed over its label
// sets.
func (h *LatencyHistory) gather(now time.Time) (sample, error) {
	mfs, err := h.cfg.Gatherer.Gather()
	if err != nil {
		return sample{}, err
	}
	s := sample{t: now, hists: make(map[string]hist, len(h.cfg.Series))}
	for _, mf := range mfs {
		if !slices.ContainsFunc(h.cfg.Series, func(ls LatencySeries) bool { return ls.Metric == mf.GetName() }) ||
			mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		var sum hist
		for _, m := range mf.GetMetric() {
			sum = sum.plus(fromProto(m.GetHistogram()))
		}
		s.hists[mf.GetName()] = sum
	}
	return s, nil
}

func fromProto(ph *dto.Histogram) hist {
	h := hist{count: ph.GetSampleCount()}
	for _, b := range ph.GetBucket() {
		if math.IsInf(b.GetUpperBound(), +1) {
			continue
		}
		h.bounds = append(h.bounds, b.GetUpperBound())
		h.counts = append(h.counts, b.GetCumulativeCount())
	}
	return h
}

// plus adds o to h; both have the same bounds, or one is empty (label
// sets of one histogram share its buckets).
func (h hist) plus(o hist) hist {
	if len(h.bounds) == 0 {
		return hist{bounds: o.bounds, counts: slices.Clone(o.counts), count: h.count + o.count}
	}
	out := hist{bounds: h.bounds, counts: slices.Clone(h.counts), count: h.count + o.count}
	for i := range min(len(out.counts), len(o.counts)) {
		out.counts[i] += o.counts[i]
	}
	return out
}

// minus is the histogram of the observations h has and base had not;
// an empty base is zero.
func (h hist) minus(base hist) hist {
	out := hist{bounds: h.bounds, counts: slices.Clone(h.counts), count: h.count - min(base.count, h.count)}
	for i := range min(len(out.counts), len(base.counts)) {
		out.counts[i] -= min(base.counts[i], out.counts[i])
	}
	return out
}

// quantile estimates the q-quantile (0 < q ≤ 1) in seconds the way
// PromQL's histogram_quantile does: find the bucket holding rank q·count
// and interpolate linearly inside it (the first bucket's lower bound is
// 0); a rank in the +Inf bucket gives the highest finite bound. Zero for
// no observations.
func (h hist) quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	rank := q * float64(h.count)
	lower, below := 0.0, uint64(0)
	for i, ub := range h.bounds {
		c := h.counts[i]
		if float64(c) >= rank {
			in := c - below
			if in == 0 {
				return ub
			}
			return lower + (ub-lower)*(rank-float64(below))/float64(in)
		}
		lower, below = ub, c
	}
	if len(h.bounds) == 0 {
		return 0
	}
	return h.bounds[len(h.bounds)-1]
}
