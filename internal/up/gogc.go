package up

import (
	"os"
	"runtime/debug"
)

// DefaultGCPercent is the garbage collector's target (GOGC) `ate up` runs
// with unless the GOGC environment variable sets one.
//
// Why not Go's 100: the control plane's live heap is a few MB
// (BENCHMARKS.md, Control plane: Stored actors), so at 100 the collector
// runs every few MB allocated — hundreds of times a second under a burst
// of wake-ups. 400 raised the fake-sandbox wake-up rate markedly and cut
// its p99 (BENCHMARKS.md, Control plane: Wake-up throughput), for a heap
// of at most five times the live one: small next to one running sandbox
// (BENCHMARKS.md, Density).
const DefaultGCPercent = 400

// TuneGC sets the collector's target to DefaultGCPercent unless GOGC is
// set in the environment, and returns the target now in effect. It
// changes the whole process: call it from a command's entry point (or a
// benchmark that stands for one), not from a library.
func TuneGC() int {
	if os.Getenv("GOGC") != "" {
		pct := debug.SetGCPercent(100)
		debug.SetGCPercent(pct)
		return pct
	}
	debug.SetGCPercent(DefaultGCPercent)
	return DefaultGCPercent
}
