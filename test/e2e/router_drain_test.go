package e2e

import (
	"net/http"
	"testing"
	"time"
)

// TestRouterDrainOnSIGTERM: 50 requests are parked (the only worker is
// busy) when `ate up` gets SIGTERM. The router at once answers /readyz
// 503 while /healthz stays 200; the API server keeps working, so another
// client can free the worker; every parked request is then served 200,
// all before `ate up` exits 0.
func TestRouterDrainOnSIGTERM(t *testing.T) {
	const n = 50
	in := startUp(t, 1, "--drain-delay", "2s", "--drain-timeout", "60s")
	// "busy" must keep the only worker until the test frees it.
	in.pinnedCounterTemplate("counter")
	for _, name := range []string{"busy", "waiter"} {
		in.ate("create", "actor", name, "--template", "counter")
	}
	in.mustCount("default/busy", 1)

	replies := make(chan reply, n)
	for range n {
		go func() {
			replies <- in.getReply("default/waiter", "/")
		}()
	}
	waitFor(t, "50 parked requests", 30*time.Second, func() bool { return in.parkedLogged(n) == 1 })

	exited := make(chan error, 1)
	go func() { exited <- in.terminate(90 * time.Second) }()
	status := func(path string) int {
		resp, err := http.Get(in.routerURL() + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor(t, "/readyz to answer 503", 10*time.Second, func() bool { return status("/readyz") == http.StatusServiceUnavailable })
	if code := status("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while draining: %d, want 200", code)
	}
	in.suspend("busy") // the API server still serves during the drain

	counts := map[string]bool{}
	var last time.Time
	for range n {
		r := <-replies
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("parked request: %d %q %v, want 200", r.code, r.body, r.err)
		}
		counts[r.body] = true
		if r.at.After(last) {
			last = r.at
		}
	}
	if len(counts) != n {
		t.Errorf("%d distinct counts among %d requests", len(counts), n)
	}
	if err := <-exited; err != nil {
		t.Fatalf("ate up: %v, want exit 0", err)
	}
	t.Logf("last parked request answered; ate up exited %s later", time.Since(last))
}
