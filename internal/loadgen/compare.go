package loadgen

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"time"

	"substrate.dev/ate/internal/latency"
)

// Side is one way to reach the server: how to connect and what to send.
type Side struct {
	Dial    func(ctx context.Context) (net.Conn, error)
	Request []byte
}

// Comparison measures a proxy against direct access to the server behind
// it, in one run (Run).
type Comparison struct {
	Proxy, Direct Side
	// Conns keep-alive connections per run; Window is each closed-loop
	// run's length (paced runs take half of it, the warm-up a tenth).
	Conns  int
	Window time.Duration
	// ProxyCPU returns the CPU time the proxy's process has used so far
	// (CPUTime).
	ProxyCPU func() (time.Duration, error)
	// ProxyAllocs returns the heap allocations the proxy's process has
	// made so far: objects and bytes. Nil skips the allocation figures.
	ProxyAllocs func() (objects, bytes float64, err error)
}

// Report is what Comparison.Run measured.
type Report struct {
	// ProxyRate and DirectRate are closed-loop requests per second;
	// ProxyCores is the proxy's CPU time over its run's wall time.
	ProxyRate, DirectRate, ProxyCores float64
	// AllocsPerReq and BytesPerReq are the proxy's heap allocations per
	// request over its closed-loop run (0 without ProxyAllocs).
	AllocsPerReq, BytesPerReq float64
	// PacedRate is the rate of the latency runs: half the lower of the
	// two closed-loop rates, so neither side queues.
	PacedRate float64
	// ProxyLat and DirectLat are the paced runs' request latencies.
	ProxyLat, DirectLat []time.Duration
}

// Run warms the proxy up, runs it closed-loop (throughput, CPU,
// allocations), then the direct side closed-loop, then each paced at
// PacedRate for latency, one after the other. Errors are Run's and the
// probes'.
func (c Comparison) Run(ctx context.Context) (Report, error) {
	run := func(s Side, rate float64, d time.Duration) (Result, error) {
		return Run(ctx, Config{Dial: s.Dial, Request: s.Request, Conns: c.Conns, Duration: d, Rate: rate})
	}
	var rep Report
	if _, err := run(c.Proxy, 0, c.Window/10); err != nil {
		return rep, fmt.Errorf("warm-up: %w", err)
	}
	allocs := c.ProxyAllocs
	if allocs == nil {
		allocs = func() (float64, float64, error) { return 0, 0, nil }
	}
	// A probe may itself allocate in the proxy (a metrics scrape): its
	// cost, measured idle, is taken off.
	o0, b0, err := allocs()
	if err != nil {
		return rep, err
	}
	o1, b1, err := allocs()
	if err != nil {
		return rep, err
	}
	cpu0, err := c.ProxyCPU()
	if err != nil {
		return rep, err
	}
	proxied, err := run(c.Proxy, 0, c.Window)
	if err != nil {
		return rep, fmt.Errorf("proxy: %w", err)
	}
	cpu1, err := c.ProxyCPU()
	if err != nil {
		return rep, err
	}
	o2, b2, err := allocs()
	if err != nil {
		return rep, err
	}
	direct, err := run(c.Direct, 0, c.Window)
	if err != nil {
		return rep, fmt.Errorf("direct: %w", err)
	}
	rep.ProxyRate, rep.DirectRate = proxied.PerSecond(), direct.PerSecond()
	rep.ProxyCores = (cpu1 - cpu0).Seconds() / proxied.Elapsed.Seconds()
	if n := float64(proxied.Requests); n > 0 {
		rep.AllocsPerReq = (o2 - o1 - (o1 - o0)) / n
		rep.BytesPerReq = (b2 - b1 - (b1 - b0)) / n
	}
	rep.PacedRate = min(rep.ProxyRate, rep.DirectRate) / 2
	for _, s := range []struct {
		side Side
		lat  *[]time.Duration
	}{{c.Proxy, &rep.ProxyLat}, {c.Direct, &rep.DirectLat}} {
		res, err := run(s.side, rep.PacedRate, c.Window/2)
		if err != nil {
			return rep, fmt.Errorf("paced: %w", err)
		}
		*s.lat = res.Latencies
	}
	return rep, nil
}

// ReportTo reports r as benchmark metrics, the proxy named prefix
// ("router"): <prefix>-req/s, <prefix>-cores, <prefix>-req/s-per-core,
// direct-req/s, allocs/req and B/req (with ProxyAllocs), paced-req/s,
// <prefix>- and direct-p50-ms and -p99-ms, and added-p50-ms and
// added-p99-ms (proxy minus direct).
func (r Report) ReportTo(rep latency.Reporter, prefix string) {
	rep.ReportMetric(r.ProxyRate, prefix+"-req/s")
	rep.ReportMetric(r.ProxyCores, prefix+"-cores")
	if r.ProxyCores > 0 {
		rep.ReportMetric(r.ProxyRate/r.ProxyCores, prefix+"-req/s-per-core")
	}
	rep.ReportMetric(r.DirectRate, "direct-req/s")
	if r.AllocsPerReq != 0 || r.BytesPerReq != 0 {
		rep.ReportMetric(r.AllocsPerReq, "allocs/req")
		rep.ReportMetric(r.BytesPerReq, "B/req")
	}
	rep.ReportMetric(r.PacedRate, "paced-req/s")
	latency.Report(rep, prefix+"-", r.ProxyLat, 0.5, 0.99)
	latency.Report(rep, "direct-", r.DirectLat, 0.5, 0.99)
	for _, q := range []float64{0.5, 0.99} {
		added := latency.Quantile(r.ProxyLat, q) - latency.Quantile(r.DirectLat, q)
		rep.ReportMetric(latency.Ms(added), fmt.Sprintf("added-p%02.0f-ms", q*100))
	}
}

// Conns is the connection count of the per-core router benchmarks, as
// proxy comparisons commonly use.
const Conns = 64

// Window is the closed-loop run length of the per-core router
// benchmarks: a second under `make test`, 10 s under `make bench` (full).
func Window(full bool) time.Duration {
	if full {
		return 10 * time.Second
	}
	return time.Second
}

// B is the part of *testing.B that Bench uses.
type B interface {
	Loop() bool
	Fatal(args ...any)
	ReportMetric(n float64, unit string)
}

// Bench runs c once per benchmark iteration and reports the last run
// (ReportTo, proxy named prefix), failing b on an error. It needs two
// CPUs, so that proxy and load can be pinned apart.
func (c Comparison) Bench(b B, prefix string) {
	if n := runtime.NumCPU(); n < 2 {
		b.Fatal(fmt.Sprintf("needs 2 CPUs to pin %s and load apart, have %d", prefix, n))
	}
	for b.Loop() {
		rep, err := c.Run(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		rep.ReportTo(b, prefix)
	}
	b.ReportMetric(0, "ns/op")
}
