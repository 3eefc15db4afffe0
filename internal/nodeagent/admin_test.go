package nodeagent

import (
	"errors"
	"slices"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/store"
)

func waitSuspended(t *testing.T, ch chan string, want string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("SuspendNode(%s), want %s", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("SuspendNode(%s) not called within 10s", want)
	}
}

func TestDrain(t *testing.T) {
	r, wf, _ := newTestRegistry(t)
	wf.suspended = make(chan string, 4)
	ctx := t.Context()
	if _, err := r.Drain(ctx, "nope", "pod terminating"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Drain(unknown) = %v, want ErrNotFound", err)
	}
	if _, _, err := r.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}), func() {}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.admit(ctx, hello("n2", 1, &atev1.NodeWorker{Name: "w2"}), func() {}); err != nil {
		t.Fatal(err)
	}
	n, err := r.Drain(ctx, "n1", "pod default/n1 terminating")
	if err != nil || n.GetPhase() != atev1.Node_DRAINING {
		t.Fatalf("Drain = %v, %v; want n1 DRAINING", n, err)
	}
	waitSuspended(t, wf.suspended, "n1")
	if got := r.ByLoad(); !slices.Equal(got, []string{"n2"}) {
		t.Fatalf("ByLoad = %v after draining n1, want [n2]: a draining node must get no new actors", got)
	}
	if _, ok := r.Get("n1"); !ok {
		t.Fatal("a draining node must stay live: its actors are being checkpointed on it")
	}
	// Draining again does not run a second drain of the same process.
	if _, err := r.Drain(ctx, "n1", "again"); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-wf.suspended:
		t.Fatalf("second Drain of one incarnation suspended %s again", got)
	default:
	}
	// The drain sticks to the name: the node restarted (new epoch) comes
	// back DRAINING and is drained again.
	r.mu.Lock()
	r.members["n1"].end = nil // its old stream ended
	r.mu.Unlock()
	leaseRanOut(t, r, "n1", 1)
	if _, _, err := r.admit(ctx, hello("n1", 2, &atev1.NodeWorker{Name: "w1"}), func() {}); err != nil {
		t.Fatal(err)
	}
	waitSuspended(t, wf.suspended, "n1")
	if got := r.ByLoad(); !slices.Equal(got, []string{"n2"}) {
		t.Fatalf("ByLoad = %v after n1 re-registered, want [n2]", got)
	}
}

func TestRemove(t *testing.T) {
	r, wf, st := newTestRegistry(t)
	ctx := t.Context()
	if err := r.Remove(ctx, "nope", "pod deleted"); err != nil {
		t.Fatalf("Remove(unknown) = %v, want nil", err)
	}
	if _, _, err := r.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}, &atev1.NodeWorker{Name: "w2"}), func() {}); err != nil {
		t.Fatal(err)
	}
	claim(t, st, "w1", "a")
	if err := r.Remove(ctx, "n1", "pod default/n1 deleted"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Get("n1"); ok {
		t.Fatal("a removed node is still live")
	}
	if got := wf.reported(); !slices.Contains(got, "w1") || !slices.Contains(got, "w2") {
		t.Fatalf("lost workers %v, want w1 and w2", got)
	}
	nodes, err := r.List(ctx)
	if err != nil || len(nodes) != 0 {
		t.Fatalf("List = %v, %v after Remove; want no node", nodes, err)
	}
	if err := r.Remove(ctx, "n1", "again"); err != nil {
		t.Fatalf("second Remove = %v, want nil", err)
	}
}

// A node another process registered (known only from the store) is
// removed as well: its workers go to WorkersLost.
func TestRemoveNodeKnownFromStore(t *testing.T) {
	r, wf, st := newTestRegistry(t)
	ctx := t.Context()
	if err := st.PutWorker(ctx, &store.Worker{Name: "w9", Node: "n9", TunnelAddr: "127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(ctx, "n9", "pod deleted"); err != nil {
		t.Fatal(err)
	}
	if got := wf.reported(); !slices.Equal(got, []string{"w9"}) {
		t.Fatalf("lost workers %v, want [w9]", got)
	}
}

// drainedStream is the server side of a Register stream that records the
// Drained answers sent on it.
type drainedStream struct {
	atev1.NodeRegistry_RegisterServer
	drained chan *atev1.Drained
}

func (s *drainedStream) Send(m *atev1.RegistryMessage) error {
	if d := m.GetDrained(); d != nil {
		s.drained <- d
	}
	return nil
}

// TestDrainEventAfterDrainNode: the node's own DRAIN event (its Pod's
// SIGTERM) after DrainNode (its Pod began terminating) is answered once
// that one drain ends, without a second. Found on a real cluster: the
// event went unanswered, so every worker Pod waited out its whole drain
// timeout for this replica's answer before it could leave.
func TestDrainEventAfterDrainNode(t *testing.T) {
	r, wf, _ := newTestRegistry(t)
	wf.suspended = make(chan string, 4)
	ctx := t.Context()
	if _, _, err := r.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}), func() {}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Drain(ctx, "n1", "pod default/n1 terminating"); err != nil {
		t.Fatal(err)
	}
	waitSuspended(t, wf.suspended, "n1")
	r.mu.Lock()
	m := r.members["n1"]
	r.mu.Unlock()
	stream := &drainedStream{drained: make(chan *atev1.Drained, 1)}
	r.event(ctx, m, wf, &atev1.NodeEvent{Kind: atev1.NodeEvent_DRAIN}, stream.Send)
	select {
	case d := <-stream.drained:
		if d.GetError() != "" {
			t.Fatalf("Drained with error %q", d.GetError())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the node's DRAIN after DrainNode got no Drained answer within 10 s")
	}
	select {
	case got := <-wf.suspended:
		t.Fatalf("the event ran a second drain of %s", got)
	default:
	}
}
