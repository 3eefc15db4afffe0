package node

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/sandbox/fake"
)

// failingDestroy is the fake runtime whose Destroy fails while fail is
// set, as `runsc delete` does when it cannot reach or kill a sandbox.
type failingDestroy struct {
	*fake.Runtime
	fail atomic.Bool
}

func (r *failingDestroy) Destroy(ctx context.Context, slot sandbox.Slot, id string) error {
	if r.fail.Load() {
		return errors.New("runsc delete: sandbox did not stop")
	}
	return r.Runtime.Destroy(ctx, slot, id)
}

// TestDestroyFailureFailsClosed: a worker whose previous sandbox could
// not be destroyed (it may still run, with the worker's volumes mounted)
// hosts no other actor until a retry destroys it.
func TestDestroyFailureFailsClosed(t *testing.T) {
	rt := &failingDestroy{Runtime: fake.New(fake.Config{})}
	n := newTestNodeWith(t, rt, true)
	w := n.order[0]
	ctx := t.Context()
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	first, _ := rt.Container(w)

	rt.fail.Store(true)
	_ = n.Stop(ctx, w, "a")
	err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "b", Atespace: "other", Name: "b", Spec: template("img1")})
	if !errors.Is(err, ErrStartFailed) || !errors.Is(err, errLeftover) {
		t.Fatalf("start beside a sandbox that outlived its destroy: %v, want ErrStartFailed wrapping errLeftover", err)
	}
	if id, ok := rt.Container(w); !ok || id != first || rt.Len() != 1 {
		t.Fatalf("worker holds %q (%v), %d containers; want only a's %s, nothing of b's", id, ok, rt.Len(), first)
	}

	rt.fail.Store(false)
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "b", Atespace: "other", Name: "b", Spec: template("img1")}); err != nil {
		t.Fatalf("start once the leftover is destroyed: %v", err)
	}
	if id, _ := rt.Container(w); id == first || rt.Len() != 1 {
		t.Fatalf("worker holds %q, %d containers; want b's only", id, rt.Len())
	}
}

// TestNoStartAfterShutdown: a start that reaches a worker after
// Shutdown's sweep passed it (a workflow still in flight while the
// process exits) is refused, so no sandbox outlives the node.
func TestNoStartAfterShutdown(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNodeWith(t, rt, false)
	n.Shutdown(t.Context())
	err := n.Start(t.Context(), StartRequest{Worker: n.order[0], ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")})
	if !errors.Is(err, ErrStartFailed) || !errors.Is(err, errShuttingDown) {
		t.Fatalf("start after shutdown: %v, want ErrStartFailed wrapping errShuttingDown", err)
	}
	if _, _, err := n.BuildGolden(t.Context(), "tpl", "ns", "tpl", template("img1"), "snap"); !errors.Is(err, errShuttingDown) {
		t.Fatalf("golden build after shutdown: %v, want errShuttingDown", err)
	}
	if rt.Len() != 0 {
		t.Fatalf("%d containers after shutdown, want none", rt.Len())
	}
}
