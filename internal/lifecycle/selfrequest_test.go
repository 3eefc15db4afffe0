package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/testwait"
)

// TestSelfCheckpointBoundToAssignment: a self-requested suspend acts
// only on the actor the record store assigns to the worker it came
// through. After the actor moved to another worker, a request naming
// its old worker is refused (nodeapi.ErrNotHosted; the self-service
// answers 409) and leaves it RUNNING; nor does a
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

	for _, tc := range []struct{ name, worker, uid string }{
		{"old worker, moved actor's uid", first, a.UID},
		{"unknown worker", "w9", a.UID},
		{"current worker, another uid", a.Worker, "b-uid"},
		{"no uid", a.Worker, ""},
	} {
		if err := e.m.RequestSelfCheckpoint(ctx, tc.worker, tc.uid, checkpoint.Suspend); !errors.Is(err, nodeapi.ErrNotHosted) {
			t.Errorf("%s: %v, want ErrNotHosted", tc.name, err)
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
	if err := e.m.RequestSelfCheckpoint(ctx, a.Worker, a.UID, checkpoint.Suspend); err != nil {
		t.Fatalf("self-suspend through the current worker: %v", err)
	}
	testwait.Until(t, "actor a SUSPENDED at its own request", func() bool {
		got := e.get(t)
		return got.State == store.Suspended && got.Reason == store.ReasonSelfRequested
	})
}

// unreachableStore fails every worker read, as a record store that
// cannot be reached.
type unreachableStore struct{ store.Store }

func (unreachableStore) GetWorker(context.Context, string) (*store.Worker, error) {
	return nil, fmt.Errorf("%w: connection refused", store.ErrUnavailable)
}

// TestSelfCheckpointStoreUnreachable: a self-requested checkpoint the
// record store cannot check is not requested, and says it is the
// store's failure (the self-service answers 503), not a refusal.
func TestSelfCheckpointStoreUnreachable(t *testing.T) {
	e := newEnv(t)
	e.resume(t)
	a := e.get(t)
	m := New(unreachableStore{e.st}, testNodes{n: e.node, live: []string{"n1"}}, e.snaps, "test", nil)
	t.Cleanup(m.Close)
	err := m.RequestSelfCheckpoint(context.Background(), a.Worker, a.UID, checkpoint.Pause)
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, nodeapi.ErrNotHosted) {
		t.Fatalf("RequestSelfCheckpoint over an unreachable store: %v, want ErrUnavailable", err)
	}
	if got := e.get(t); got.State != store.Running {
		t.Fatalf("actor a is %s, want RUNNING", got.State)
	}
}
