// Package latency summarises latency samples for benchmarks: nearest-rank
// quantiles, reported in milliseconds, the way every BENCHMARKS.md table
// gives them.
package latency

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Quantile returns the nearest-rank q-quantile (0 ≤ q ≤ 1) of d without
// changing d; zero for no samples.
func Quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[rank(len(s), q)]
}

// rank is the 0-based index of the nearest-rank q-quantile of n > 0
// sorted samples: the smallest sample with at least q·n samples at or
// below it, ceil(q·n)−1, and 0 for q = 0. The tolerance keeps a q·n that
// float64 cannot hold exactly (0.95·20 = 19) from rounding up a rank.
func rank(n int, q float64) int {
	k := int(math.Ceil(q*float64(n) - 1e-9))
	return max(0, min(n-1, k-1))
}

// Ms converts d to fractional milliseconds.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Reporter is the part of *testing.B that Report needs.
type Reporter interface {
	ReportMetric(n float64, unit string)
}

// Report reports each quantile of d as "<prefix>p<NN>-ms" (q 0.5 →
// "p50-ms"). It reports nothing for no samples.
func Report(r Reporter, prefix string, d []time.Duration, qs ...float64) {
	if len(d) == 0 {
		return
	}
	for _, q := range qs {
		r.ReportMetric(Ms(Quantile(d, q)), fmt.Sprintf("%sp%02.0f-ms", prefix, q*100))
	}
}
