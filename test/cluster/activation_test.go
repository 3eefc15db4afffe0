package cluster

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// activations suspends actor (atespace/name) and then times the request
// for path that wakes it through the router Service, n times, and logs the
// percentiles under label: the numbers BENCHMARKS.md reports for the
// cluster (TLS on and off in one run). Nothing is asserted of the times;
// every activation must answer 200.
func (in *install) activations(t *testing.T, ctx context.Context, label, actor, path string, n int) {
	t.Helper()
	u, err := routerURL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, name, _ := strings.Cut(actor, "/")
	var took []time.Duration
	for range n {
		if _, err := in.ate(ctx, "suspend", "actor", name); err != nil {
			t.Fatal(err)
		}
		if st, err := in.actorState(ctx, actor); err != nil || st != "SUSPENDED" {
			t.Fatalf("%s after suspend: %q %v", actor, st, err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u+strings.TrimPrefix(path, "/"), nil)
		req.Header.Set("ate-target-actor", actor)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("activation of %s: %v", actor, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took = append(took, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("activation of %s: %s", actor, resp.Status)
		}
	}
	slices.Sort(took)
	q := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	t.Logf("activation through the router Service, %s: n=%d p50 %v p95 %v p99 %v (max)", label, len(took),
		q(0.50).Round(time.Millisecond), q(0.95).Round(time.Millisecond), q(0.99).Round(time.Millisecond))
}
