// Package testwait waits in tests for a condition, with a deadline, so no
// test sleeps to synchronise.
package testwait

import (
	"testing"
	"time"
)

// Timeout is how long Until waits before failing the test.
const Timeout = 10 * time.Second

// Until polls cond every millisecond until it holds, failing the test
// (t.Fatalf naming what) after Timeout. Call it from the test's goroutine.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
