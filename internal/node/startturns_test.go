package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/testwait"
)

// heldRuntime is the fake runtime whose boots wait for a token on
// release (or their ctx), counting how many are inside at once.
type heldRuntime struct {
	*fake.Runtime
	release chan struct{}

	mu           sync.Mutex
	inside, most int
	entered      int
	booted       []string // the containers, in boot order
}

func (r *heldRuntime) Run(ctx context.Context, slot sandbox.Slot, spec sandbox.Spec) error {
	r.mu.Lock()
	r.inside++
	r.entered++
	r.most = max(r.most, r.inside)
	r.booted = append(r.booted, spec.ID)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inside--
		r.mu.Unlock()
	}()
	select {
	case <-r.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.Runtime.Run(ctx, slot, spec)
}

// order is the actors whose boots began, in order (a container's id
// is "ate-<actor uid>-<random>").
func (r *heldRuntime) order() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var actors []string
	for _, id := range r.booted {
		actors = append(actors, strings.Split(id, "-")[1])
	}
	return actors
}

func (r *heldRuntime) counts() (entered, most int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.entered, r.most
}

// newTurnsNode is a node of workers workers, no standbys, whose boots
// wait on rt and which runs at most maxStarts at once.
func newTurnsNode(t *testing.T, rt *heldRuntime, workers, maxStarts int) *Node {
	t.Helper()
	return newTestNodeWith(t, rt, true, func(c *Config) { c.Workers, c.MaxParallelStarts = workers, maxStarts })
}

// queueBehindOne starts a0, which boots and is held in rt, then a1 with
// ctx, and returns once a1 waits for its turn; their Starts' results
// come on first and second. The node runs one start at a time.
func queueBehindOne(t *testing.T, n *Node, rt *heldRuntime, ctx context.Context) (first, second <-chan error) {
	t.Helper()
	f, sc := make(chan error, 1), make(chan error, 1)
	go func() { f <- n.Start(t.Context(), startReq(n, 0)) }()
	testwait.Until(t, "the first start booting", func() bool { e, _ := rt.counts(); return e == 1 })
	go func() { sc <- n.Start(ctx, startReq(n, 1)) }()
	testwait.Until(t, "the second start waiting its turn", func() bool { return n.turns.waiting.Load() == 1 })
	return f, sc
}

func startReq(n *Node, i int) StartRequest {
	name := fmt.Sprintf("a%d", i)
	return StartRequest{Worker: n.order[i], ActorUID: name, Atespace: "ns", Name: name, Spec: template("img1")}
}

// TestStartsTakeTurns: with MaxParallelStarts 2, a third start waits
// until one of the first two has booted, then boots; never more than
// two are inside the runtime.
func TestStartsTakeTurns(t *testing.T) {
	rt := &heldRuntime{Runtime: fake.New(fake.Config{}), release: make(chan struct{})}
	n := newTurnsNode(t, rt, 3, 2)
	errs := make(chan error, 3)
	for i := range 3 {
		go func() { errs <- n.Start(t.Context(), startReq(n, i)) }()
	}
	testwait.Until(t, "two starts booting and one waiting its turn", func() bool {
		entered, _ := rt.counts()
		return entered == 2 && n.turns.waiting.Load() == 1
	})
	rt.release <- struct{}{}
	testwait.Until(t, "the third start booting", func() bool {
		entered, _ := rt.counts()
		return entered == 3 && n.turns.waiting.Load() == 0
	})
	close(rt.release)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if _, most := rt.counts(); most != 2 {
		t.Fatalf("%d starts booted at once, want at most 2", most)
	}
}

// TestStartWaitingItsTurnEnds: a start whose caller gives up while it
// waits for its turn returns the caller's error without booting, and
// leaves its worker ready for the next start.
func TestStartWaitingItsTurnEnds(t *testing.T) {
	rt := &heldRuntime{Runtime: fake.New(fake.Config{}), release: make(chan struct{})}
	n := newTurnsNode(t, rt, 2, 1)
	ctx, cancel := context.WithCancel(t.Context())
	first, second := queueBehindOne(t, n, rt, ctx)
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("start given up while waiting: %v, want context.Canceled", err)
	}
	if e, _ := rt.counts(); e != 1 {
		t.Fatalf("%d boots, want 1: the start given up booted", e)
	}

	close(rt.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context(), startReq(n, 1)); err != nil {
		t.Fatalf("the next start on the worker: %v", err)
	}
}

// TestStartTurnIsBoundedPastBoot: an actor whose wakeup probe never
// passes keeps its start's turn for probeTurn at most, so the next start
// boots and serves while the first still probes.
func TestStartTurnIsBoundedPastBoot(t *testing.T) {
	rt := &heldRuntime{Runtime: fake.New(fake.Config{}), release: make(chan struct{})}
	close(rt.release)
	n := newTurnsNode(t, rt, 2, 1)
	silent := startReq(n, 0)
	silent.Spec.WakeupProbe = &atev1.Probe{HttpGet: &atev1.HTTPGetAction{Path: "/never"}, TimeoutSeconds: 30}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first := make(chan error, 1)
	go func() { first <- n.Start(ctx, silent) }()
	testwait.Until(t, "the silent actor booted", func() bool { e, _ := rt.counts(); return e == 1 })

	if err := n.Start(t.Context(), startReq(n, 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-first:
		t.Fatalf("the silent actor's start ended (%v) before the next start got its turn", err)
	default:
	}
	cancel()
	if err := <-first; err == nil {
		t.Fatal("a start whose probe never passed succeeded")
	}
}

// TestStartsTakeTurnsInOrder: starts that wait are admitted in the order
// they began to wait.
func TestStartsTakeTurnsInOrder(t *testing.T) {
	rt := &heldRuntime{Runtime: fake.New(fake.Config{}), release: make(chan struct{})}
	n := newTurnsNode(t, rt, 4, 1)
	errs := make(chan error, 4)
	go func() { errs <- n.Start(t.Context(), startReq(n, 0)) }()
	testwait.Until(t, "the first start booting", func() bool { e, _ := rt.counts(); return e == 1 })
	for i := 1; i < 4; i++ {
		go func() { errs <- n.Start(t.Context(), startReq(n, i)) }()
		testwait.Until(t, fmt.Sprintf("start %d waiting its turn", i), func() bool { return n.turns.waiting.Load() == int64(i) })
	}
	for i := range 4 {
		rt.release <- struct{}{}
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			testwait.Until(t, fmt.Sprintf("start %d booting", i+1), func() bool { e, _ := rt.counts(); return e == i+2 })
		}
	}
	if got, want := rt.order(), []string{"a0", "a1", "a2", "a3"}; !slices.Equal(got, want) {
		t.Fatalf("boot order %v, want %v", got, want)
	}
}

// TestShutdownEndsStartsWaitingTheirTurn: a start waiting for its turn
// when the node shuts down ends with errShuttingDown without booting,
// instead of booting once the starts before it are done.
func TestShutdownEndsStartsWaitingTheirTurn(t *testing.T) {
	rt := &heldRuntime{Runtime: fake.New(fake.Config{}), release: make(chan struct{})}
	n := newTurnsNode(t, rt, 2, 1)
	first, second := queueBehindOne(t, n, rt, t.Context())

	shut := make(chan struct{})
	go func() { n.Shutdown(context.Background()); close(shut) }()
	if err := <-second; !errors.Is(err, errShuttingDown) {
		t.Fatalf("start waiting its turn at shutdown: %v, want errShuttingDown", err)
	}
	if e, _ := rt.counts(); e != 1 {
		t.Fatalf("%d boots, want 1: the waiting start booted", e)
	}
	close(rt.release)
	<-first
	<-shut
}

// TestNegativeMaxParallelStartsIsRefused: the operator's flag is checked
// at start-up, with a message naming it.
func TestNegativeMaxParallelStartsIsRefused(t *testing.T) {
	_, err := New(t.Context(), Config{Name: "n1", MaxParallelStarts: -1})
	if err == nil || !strings.Contains(err.Error(), "--max-parallel-starts") {
		t.Fatalf("New with MaxParallelStarts -1: %v, want an error naming --max-parallel-starts", err)
	}
}
