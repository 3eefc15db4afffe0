package router

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// The router starts goroutines per request and per shared resume; none may
// outlive the tests. With benchRouterEnv set the binary is instead the
// router process of BenchmarkRouterPerCorePlainActor.
func TestMain(m *testing.M) {
	if backend := os.Getenv(benchRouterEnv); backend != "" {
		os.Exit(runBenchRouter(backend))
	}
	goleak.VerifyTestMain(m)
}
