package node

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/tunnelproto"
)

// TestLateCallOfATakenOverWorkflowIsFenced: a workflow that stood still
// past its lease sends its stop or checkpoint after the new holder
// restored the actor on the same worker. The node refuses it by the
// older lease token and the new holder's sandbox keeps running; without
// the check the late stop destroyed it, and what the actor answered
// since with it.
func TestLateCallOfATakenOverWorkflowIsFenced(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNodeWith(t, rt, true, func(c *Config) { c.Workers = 2 })
	w, other := n.order[0], n.order[1]
	ctx := t.Context()
	old, current := nodeapi.WithFence(ctx, 7), nodeapi.WithFence(ctx, 9)

	if err := n.Start(old, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	// The new holder settles the old workflow's state (a stop) and
	// restores the actor on the same worker.
	if err := n.Stop(current, w, "a"); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(current, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	running, _ := rt.Container(w)

	if err := n.Stop(old, w, "a"); !errors.Is(err, ErrFenced) {
		t.Errorf("late stop under token 7 after token 9: %v, want ErrFenced", err)
	}
	if _, err := n.Checkpoint(old, w, "a", CheckpointOptions{}); !errors.Is(err, ErrFenced) {
		t.Errorf("late checkpoint under token 7 after token 9: %v, want ErrFenced", err)
	}
	if err := n.Start(old, StartRequest{Worker: other, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); !errors.Is(err, ErrFenced) {
		t.Errorf("late start on another worker under token 7 after token 9: %v, want ErrFenced", err)
	}
	if id, ok := rt.Container(w); !ok || id != running {
		t.Fatalf("worker holds %q (%v), want the new holder's sandbox %s still running", id, ok, running)
	}
	if _, ok := rt.Container(other); ok {
		t.Fatal("the late start put a second copy of the actor on another worker")
	}

	// The holder's own calls and those that carry no token pass.
	if _, err := n.Checkpoint(current, w, "a", CheckpointOptions{}); err != nil {
		t.Fatalf("checkpoint under the current token: %v", err)
	}
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatalf("start without a token: %v", err)
	}
}

func TestFenceTokens(t *testing.T) {
	var f fenceTokens
	steps := []struct {
		actor string
		token int64
		ok    bool
	}{
		{"a", 5, true},
		{"a", 5, true},  // the same workflow's next call
		{"a", 4, false}, // an older workflow's
		{"b", 1, true},  // tokens are per actor
		{"a", 0, true},  // no token: not checked
		{"a", 6, true},
		{"a", 5, false},
	}
	for i, s := range steps {
		err := f.admit(s.actor, s.token)
		if (err == nil) != s.ok || (err != nil && !errors.Is(err, ErrFenced)) {
			t.Errorf("step %d: admit(%s, %d) = %v, want ok %v", i, s.actor, s.token, err, s.ok)
		}
	}
	// Bounded: the actor seen first is forgotten once fenceTokensKept
	// others have been seen, the oldest first, and the set stays that
	// size.
	for i := range fenceTokensKept - 1 {
		if err := f.admit(fmt.Sprint("x", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.admit("a", 1); err != nil {
		t.Fatalf("a forgotten actor's token: %v", err)
	}
	_, bKept := f.newest.get("b")
	_, x0Kept := f.newest.get("x0")
	if bKept || !x0Kept || len(f.newest.m) != fenceTokensKept {
		t.Fatalf("b kept %v, x0 kept %v, %d actors kept; want b forgotten (the oldest), x0 kept, %d", bKept, x0Kept, len(f.newest.m), fenceTokensKept)
	}
}

// TestTunnelChecksTheAssignment: a request that names an assignment
// token (the router's view of the actor's placement) is served only by
// a sandbox started under that token; one that names none is not
// checked.
func TestTunnelChecksTheAssignment(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	w := n.order[0]
	if err := n.Start(nodeapi.WithFence(t.Context(), 7), StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	tunnel := httptest.NewServer(n.NewTunnel())
	defer tunnel.Close()
	for _, tc := range []struct {
		assignment string
		want       int
	}{
		{"7", http.StatusOK},
		{"", http.StatusOK},
		{"0", http.StatusOK},
		{"6", tunnelproto.StatusStale}, // an older placement's view
		{"8", tunnelproto.StatusStale}, // a newer one's: this sandbox is not it
		{"seven", tunnelproto.StatusStale},
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, tunnel.URL+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(tunnelproto.HeaderWorker, w)
		req.Header.Set(tunnelproto.HeaderActorUID, "a")
		if tc.assignment != "" {
			req.Header.Set(tunnelproto.HeaderAssignment, tc.assignment)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("assignment %q: %d, want %d", tc.assignment, resp.StatusCode, tc.want)
		}
	}
}
