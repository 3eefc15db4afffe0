package lifecycle

import (
	"context"
	"net/http"
	"testing"

	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/testwait"
)

// TestSelfCheckpointBoundToAssignment: a self-requested suspend acts
// only on the actor the record store assigns to the worker it came
// through. After the actor moved to another worker, a request naming
// its old worker is refused (409) and leaves it RUNNING; nor does a
// stale request reach the worker's new holder; PutAway re-checks the
// assignment under the actor's lock.
func TestSelfCheckpointBoundToAssignment(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.resume(t)
	first := e.get(t).Worker

	// Move the actor: suspend, pin the first worker with another actor,
	// resume onto the other one.
	if _, err := e.m.Suspend(ctx, key("a")); err != nil {
		t.Fatal(err)
	}
	b := &store.Actor{Atespace: "default", Name: "b", UID: "b-uid", Template: "tpl", Lifecycle: store.Lifecycle{State: store.Suspended},
		WorkerSelector: nil}
	must(t, e.st.CreateActor(ctx, b))
	b, err := e.st.GetActor(ctx, key("b"))
	must(t, err)
	if _, _, err := e.st.ClaimWorker(ctx, b, "", first); err != nil {
		t.Fatal(err)
	}
	e.resume(t)
	a := e.get(t)
	if a.Worker == first || a.State != store.Running {
		t.Fatalf("actor a on %q (%s), want RUNNING on the other worker than %s", a.Worker, a.State, first)
	}

	for _, tc := range []struct {
		name, worker, uid string
		status            int
	}{
		{"old worker, moved actor's uid", first, a.UID, http.StatusConflict},
		{"unknown worker", "w9", a.UID, http.StatusConflict},
		{"current worker, another uid", a.Worker, "b-uid", http.StatusConflict},
		{"no uid", a.Worker, "", http.StatusConflict},
	} {
		if code, answer := e.m.ServeSelfCheckpoint(ctx, tc.worker, tc.uid, checkpoint.Suspend); code != tc.status {
			t.Errorf("%s: %d %q, want %d", tc.name, code, answer, tc.status)
		}
	}
	// The fire-and-forget path (older nodes' events) drops it too.
	e.m.SelfRequest(first, a.UID, checkpoint.Suspend)

	// PutAway bound to the old assignment is refused under the lock.
	if _, err := e.m.PutAway(ctx, key("a"), checkpoint.Suspend, Why{Reason: store.ReasonSelfRequested, OnWorker: first, UID: a.UID}); err == nil {
		t.Error("PutAway bound to the old worker succeeded")
	}
	if got := e.get(t); got.State != store.Running || got.Worker != a.Worker {
		t.Fatalf("after stale requests actor a is %s on %q, want RUNNING on %s", got.State, got.Worker, a.Worker)
	}

	// Through its current worker: accepted and done.
	if code, answer := e.m.ServeSelfCheckpoint(ctx, a.Worker, a.UID, checkpoint.Suspend); code != http.StatusAccepted {
		t.Fatalf("self-suspend through the current worker: %d %q", code, answer)
	}
	testwait.Until(t, "actor a SUSPENDED at its own request", func() bool {
		got := e.get(t)
		return got.State == store.Suspended && got.Reason == store.ReasonSelfRequested
	})
}
