package e2e

import (
	"testing"
)

// BenchmarkObservability measures what metrics and tracing cost on the
// warm request path and on activation (a resume from the actor's durable
// snapshot), in one run: "off" has no management listener and no
// dashboard (either records metrics) and no tracing, "metrics" is `ate up`'s default, "tracing"
// adds OTLP export of every span to an in-test receiver. The router's
// access log is written in every mode (at debug level, as every e2e
// installation logs).
func BenchmarkObservability(b *testing.B) {
	for _, mode := range []struct {
		name    string
		flags   []string
		tracing bool
	}{
		{"off", []string{"--metrics-addr", "", "--http-addr", ""}, false},
		{"metrics", nil, false},
		{"tracing", nil, true},
	} {
		b.Run("Warm/"+mode.name, func(b *testing.B) {
			if mode.tracing {
				startOTLPReceiver(b)
			}
			in := startUp(b, 2, append([]string{"--demo"}, mode.flags...)...)
			in.mustCount("default/counter-1", 1)
			benchActivation(b, in, func() string { return "counter-1" })
		})
		b.Run("Activation/"+mode.name, func(b *testing.B) {
			if mode.tracing {
				startOTLPReceiver(b)
			}
			in := startUp(b, 2, append([]string{"--demo"}, mode.flags...)...)
			in.mustCount("default/counter-1", 1)
			benchActivation(b, in, func() string {
				in.standbyAfter(func() { in.suspend("counter-1") })
				return "counter-1"
			})
		})
	}
}
