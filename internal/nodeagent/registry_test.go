package nodeagent

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
)

// lostRecorder is the Workflows neighbour: it records which workers were
// reported lost and frees them as the lifecycle manager would.
type lostRecorder struct {
	st   store.Store
	mu   sync.Mutex
	lost []string
	// suspended receives the node of each SuspendNode, when not nil.
	suspended chan string
	// changed has a value after a report that waitReported has not yet
	// seen; made by waitReported, guarded by mu.
	changed chan struct{}
}

func (l *lostRecorder) WorkerExited(string, string)                   {}
func (l *lostRecorder) WorkerIdle(string)                             {}
func (l *lostRecorder) SelfRequest(string, string, checkpoint.Action) {}
func (l *lostRecorder) SuspendNode(_ context.Context, node string) error {
	if l.suspended != nil {
		l.suspended <- node
	}
	return nil
}
func (l *lostRecorder) ClaimsNotHosted(ctx context.Context, _ string, ws []*store.Worker, why string) error {
	return l.WorkersLost(ctx, ws, why)
}

func (l *lostRecorder) WorkersLost(ctx context.Context, ws []*store.Worker, _ string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range ws {
		// Recorded once released, so a test that sees the report can
		// end (and close the store) without racing the release.
		if err := l.st.ReleaseWorker(ctx, w.Name, w.ActorUID); err != nil {
			return err
		}
		l.lost = append(l.lost, w.Name)
	}
	if l.changed != nil {
		select {
		case l.changed <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
	return nil
}

func (l *lostRecorder) reported() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(slices.Values(l.lost))
}

// waitReported returns the workers reported lost once any are, for
// reports the registry makes on a goroutine (ClaimsNotHosted); it fails
// t if none come within 10 s.
func (l *lostRecorder) waitReported(t *testing.T) []string {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		if l.changed == nil {
			l.changed = make(chan struct{}, 1)
		}
		changed, got := l.changed, slices.Sorted(slices.Values(l.lost))
		l.mu.Unlock()
		if len(got) > 0 {
			return got
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatal("no worker reported lost within 10 s")
		}
	}
}

func newTestRegistry(t *testing.T) (*Registry, *lostRecorder, store.Store) {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r, err := NewRegistry(t.Context(), RegistryConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close) // the connections admit dialled; before st closes
	wf := &lostRecorder{st: st}
	r.SetWorkflows(wf)
	return r, wf, st
}

func hello(node string, epoch int64, workers ...*atev1.NodeWorker) *atev1.NodeHello {
	return &atev1.NodeHello{Node: node, Epoch: epoch, Address: "127.0.0.1:1", TunnelAddress: "127.0.0.1:2", Workers: workers}
}

// leaseRanOut ends the lease of node's incarnation epoch in r's store,
// as its running out would.
func leaseRanOut(t *testing.T, r *Registry, node string, epoch int64) {
	t.Helper()
	if err := r.cfg.Store.ReleaseLease(t.Context(), nodeLeaseKey(node), r.leaseHolder(node, epoch)); err != nil {
		t.Fatal(err)
	}
}

// claim makes actor uid hold worker in the store.
func claim(t *testing.T, st store.Store, worker, uid string) {
	t.Helper()
	ctx := t.Context()
	if err := st.CreateAtespace(ctx, &store.Atespace{Name: "default"}); err != nil && !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatal(err)
	}
	if err := st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl", UID: "tpl-uid"}); err != nil && !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatal(err)
	}
	a := &store.Actor{Atespace: "default", Name: uid, UID: uid, Template: "tpl", Lifecycle: store.Lifecycle{State: store.Suspended}}
	if err := st.CreateActor(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ClaimWorker(ctx, a, "", worker); err != nil {
		t.Fatal(err)
	}
}

func TestAdmit(t *testing.T) {
	ctx := context.Background()
	t.Run("a name heartbeating under another epoch is refused", func(t *testing.T) {
		r, _, _ := newTestRegistry(t)
		if _, _, err := r.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}), func() {}); err != nil {
			t.Fatal(err)
		}
		_, _, err := r.admit(ctx, hello("n1", 2, &atev1.NodeWorker{Name: "w1"}), func() {})
		if status.Code(err) != codes.AlreadyExists {
			t.Fatalf("second n1 = %v, want AlreadyExists", err)
		}
	})
	t.Run("a node on another snapshot store is refused", func(t *testing.T) {
		r, _, _ := newTestRegistry(t)
		r.cfg.Snapshots = "s3://b/p?endpoint=http://s3:8333"
		h := hello("n1", 1, &atev1.NodeWorker{Name: "w1"})
		h.Snapshots = "/var/lib/ate-node/snapshots"
		if _, _, err := r.admit(ctx, h, func() {}); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("admit = %v, want FailedPrecondition", err)
		}
		h.Snapshots = r.cfg.Snapshots
		if _, _, err := r.admit(ctx, h, func() {}); err != nil {
			t.Fatalf("admit with the same store = %v", err)
		}
	})
	t.Run("a worker name another node registered is refused", func(t *testing.T) {
		r, _, _ := newTestRegistry(t)
		if _, _, err := r.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}), func() {}); err != nil {
			t.Fatal(err)
		}
		_, _, err := r.admit(ctx, hello("n2", 1, &atev1.NodeWorker{Name: "w1"}), func() {})
		if status.Code(err) != codes.AlreadyExists {
			t.Fatalf("n2 with n1's worker = %v, want AlreadyExists", err)
		}
	})
	t.Run("a new epoch: claimed workers it does not host are lost, sandboxes it should not host are stopped", func(t *testing.T) {
		r, wf, st := newTestRegistry(t)
		m, _, err := r.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}, &atev1.NodeWorker{Name: "w2"}), func() {})
		if err != nil {
			t.Fatal(err)
		}
		m.end = nil // its stream ended: the name may be taken by a new epoch
		claim(t, st, "w1", "a")
		// A new epoch waits for the last one's lease to run out.
		h2 := hello("n1", 2, &atev1.NodeWorker{Name: "w1"})
		if _, _, err := r.admit(ctx, h2, func() {}); status.Code(err) != codes.Unavailable {
			t.Fatalf("a new epoch while the last one's lease holds = %v, want Unavailable", err)
		}
		if got := wf.reported(); len(got) != 0 {
			t.Fatalf("a refused new epoch lost workers %v", got)
		}
		leaseRanOut(t, r, "n1", 1)
		// The restarted node hosts nothing on w1 (its sandbox died with the
		// old process) and, somehow, an actor the store never placed on w2.
		_, stops, err := r.admit(ctx, hello("n1", 2, &atev1.NodeWorker{Name: "w1"},
			&atev1.NodeWorker{Name: "w2", HostedActorUid: "stray"}), func() {})
		if err != nil {
			t.Fatal(err)
		}
		if got := wf.waitReported(t); !slices.Contains(got, "w1") {
			t.Fatalf("lost workers %v, want w1 (claimed by a, not hosted by the new epoch)", got)
		}
		if len(stops) != 1 || stops[0].GetWorker() != "w2" || stops[0].GetActorUid() != "stray" {
			t.Fatalf("stop orders %v, want the stray sandbox on w2", stops)
		}
		if _, ok := r.Get("n1"); !ok {
			t.Fatal("n1 not live after its new registration")
		}
	})
	t.Run("the same epoch reconnecting keeps its actors", func(t *testing.T) {
		r, wf, st := newTestRegistry(t)
		m, _, err := r.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}), func() {})
		if err != nil {
			t.Fatal(err)
		}
		m.end = nil
		claim(t, st, "w1", "a")
		// Reconnected mid-start: the hello was taken before the sandbox ran.
		h := hello("n1", 1, &atev1.NodeWorker{Name: "w1"})
		h.LeaseToken = m.leaseToken
		if _, stops, err := r.admit(ctx, h, func() {}); err != nil || len(stops) != 0 {
			t.Fatalf("reconnect = %v, stops %v", err, stops)
		}
		if got := wf.reported(); len(got) != 0 {
			t.Fatalf("a reconnect of the same process lost workers %v", got)
		}
	})
	t.Run("the same epoch whose lease lapsed is reconciled as a new process", func(t *testing.T) {
		r, wf, st := newTestRegistry(t)
		m, _, err := r.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}), func() {})
		if err != nil {
			t.Fatal(err)
		}
		m.end = nil
		claim(t, st, "w1", "a")
		// Its lease ran out (another replica may have declared it lost
		// and placed a elsewhere): what it says it hosts decides.
		leaseRanOut(t, r, "n1", 1)
		h := hello("n1", 1, &atev1.NodeWorker{Name: "w1"})
		h.LeaseToken = m.leaseToken
		m2, _, err := r.admit(ctx, h, func() {})
		if err != nil {
			t.Fatal(err)
		}
		if m2.leaseToken == m.leaseToken {
			t.Fatalf("lease token %d kept across a lapse, want a new one", m2.leaseToken)
		}
		if got := wf.waitReported(t); !slices.Equal(got, []string{"w1"}) {
			t.Fatalf("lost workers %v, want w1 (claimed by a, not hosted after the lapse)", got)
		}
	})
}

func TestDeclareLost(t *testing.T) {
	r, wf, st := newTestRegistry(t)
	ctx := context.Background()
	if _, _, err := r.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}), func() {}); err != nil {
		t.Fatal(err)
	}
	claim(t, st, "w1", "a")
	r.declareLost(ctx, "n1", 0, "no heartbeat")
	if _, ok := r.Get("n1"); ok {
		t.Fatal("a lost node is still live")
	}
	if _, ok := r.ForWorker("w1"); ok {
		t.Fatal("a lost node's worker still has a node")
	}
	if got := wf.reported(); !slices.Equal(got, []string{"w1"}) {
		t.Fatalf("lost workers %v, want [w1]", got)
	}
	nodes, err := r.List(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].GetPhase() != atev1.Node_LOST || nodes[0].GetMessage() != "no heartbeat" {
		t.Fatalf("List = %v, %v; want n1 LOST with its reason", nodes, err)
	}
}

func TestByLoad(t *testing.T) {
	r, _, _ := newTestRegistry(t)
	ctx := context.Background()
	for _, n := range []string{"busy", "idle"} {
		if _, _, err := r.admit(ctx, hello(n, 1, &atev1.NodeWorker{Name: n + "-w1"}, &atev1.NodeWorker{Name: n + "-w2"}), func() {}); err != nil {
			t.Fatal(err)
		}
	}
	busy, _ := r.Get("busy")
	busy.(*Remote).hosts("busy-w1", "a")
	if got := r.ByLoad(); !slices.Equal(got, []string{"idle", "busy"}) {
		t.Fatalf("ByLoad = %v, want the idle node first", got)
	}
	// A draining node takes no new actors but is still reachable.
	r.members["idle"].phase = atev1.Node_DRAINING
	if got := r.ByLoad(); !slices.Equal(got, []string{"busy"}) {
		t.Fatalf("ByLoad with idle draining = %v, want [busy]", got)
	}
	if _, ok := r.Get("idle"); !ok {
		t.Fatal("a draining node must stay reachable for its checkpoints")
	}
}

// TestAdmitAfterAPIServerRestart: nodes known only from the store
// (PENDING) re-register with whatever epoch they have; actors they still
// host keep running, and only claims they no longer host are lost.
func TestAdmitAfterAPIServerRestart(t *testing.T) {
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, w := range []string{"w1", "w2"} {
		if err := st.PutWorker(ctx, &store.Worker{Name: w, Node: "n1"}); err != nil {
			t.Fatal(err)
		}
	}
	claim(t, st, "w1", "a")                               // still runs on n1
	claim(t, st, "w2", "b")                               // its sandbox is gone
	r, err := NewRegistry(ctx, RegistryConfig{Store: st}) // the restarted API server
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	wf := &lostRecorder{st: st}
	r.SetWorkflows(wf)
	if nodes, _ := r.List(ctx); len(nodes) != 1 || nodes[0].GetPhase() != atev1.Node_PENDING {
		t.Fatalf("before it registers n1 is %v, want PENDING", nodes)
	}
	_, stops, err := r.admit(ctx, hello("n1", 42, &atev1.NodeWorker{Name: "w1", HostedActorUid: "a"}, &atev1.NodeWorker{Name: "w2"}), func() {})
	if err != nil || len(stops) != 0 {
		t.Fatalf("admit = %v, stops %v; want no stop orders", err, stops)
	}
	if got := wf.waitReported(t); !slices.Equal(got, []string{"w2"}) {
		t.Fatalf("lost workers %v, want only [w2]: a still runs on w1", got)
	}
}

// TestLost: a worker's node is lost when it was declared so or no node
// owns the worker; a node known only from the store (PENDING, after the
// API server restarted) is not — it may be serving, heard by another
// replica — unless node and API server are one process, whose last
// incarnation died with it.
func TestLost(t *testing.T) {
	ctx := t.Context()
	for _, oneProcess := range []bool{false, true} {
		r, _, st := newTestRegistry(t)
		if _, _, err := r.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}), func() {}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.admit(ctx, hello("n2", 1, &atev1.NodeWorker{Name: "w2"}), func() {}); err != nil {
			t.Fatal(err)
		}
		r.declareLost(ctx, "n2", 0, "test")
		restarted, err := NewRegistry(ctx, RegistryConfig{Store: st, OneProcess: oneProcess})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(restarted.Close)
		for _, tt := range []struct {
			r      *Registry
			worker string
			want   bool
		}{
			{r, "w1", false},
			{r, "w2", true},
			{r, "w9", true},
			{restarted, "w1", oneProcess},
		} {
			if got := tt.r.Lost(tt.worker); got != tt.want {
				t.Errorf("OneProcess=%t, restarted=%t: Lost(%s) = %t, want %t", oneProcess, tt.r == restarted, tt.worker, got, tt.want)
			}
		}
	}
}
