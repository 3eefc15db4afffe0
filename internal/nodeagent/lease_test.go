package nodeagent

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
	"substrate.dev/ate/internal/testwait"
)

// onLost is a lostRecorder that runs hook when workers are reported
// lost, before recording them.
type onLost struct {
	*lostRecorder
	hook func()
}

func (o *onLost) WorkersLost(ctx context.Context, ws []*store.Worker, why string) error {
	o.hook()
	return o.lostRecorder.WorkersLost(ctx, ws, why)
}

// TestLossNeedsTheLeaseToLapse: two replicas over one store, the node
// registered with one (b). The other (a), which does not hear the node,
// declares nothing while b holds the node's lease; once the lease has
// run out it declares the node lost, and while it does, b can neither
// renew the lease nor welcome the node again.
func TestLossNeedsTheLeaseToLapse(t *testing.T) {
	ctx := t.Context()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	newReplica := func() *Registry {
		r, err := NewRegistry(ctx, RegistryConfig{Store: st, Shared: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	b := newReplica()
	bw := &lostRecorder{st: st}
	b.SetWorkflows(bw)
	m, _, err := b.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}), func() {})
	if err != nil {
		t.Fatal(err)
	}
	a := newReplica() // knows n1 from the store only
	var duringLoss []error
	aw := &onLost{lostRecorder: &lostRecorder{st: st}, hook: func() {
		b.mu.Lock()
		m.renewed = time.Time{} // due
		b.mu.Unlock()
		duringLoss = append(duringLoss,
			b.renew(ctx, m, &atev1.NodeHeartbeat{Seq: 1, LeaseToken: m.leaseToken}, func(*atev1.RegistryMessage) error { return nil }))
		_, _, err := b.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}), func() {})
		duringLoss = append(duringLoss, err)
	}}
	a.SetWorkflows(aw)

	a.declareIfLapsed(ctx, "n1", "silent here")
	if got := aw.reported(); len(got) != 0 {
		t.Fatalf("a declared n1 lost (workers %v) while b held its lease", got)
	}
	if _, ok := a.members["n1"]; !ok || a.members["n1"].phase == atev1.Node_LOST {
		t.Fatal("a marked n1 lost while b held its lease")
	}

	leaseRanOut(t, b, "n1", 1)
	a.declareIfLapsed(ctx, "n1", "silent here")
	if got := aw.reported(); len(got) != 1 || got[0] != "w1" {
		t.Fatalf("a reported %v lost once n1's lease ran out, want [w1]", got)
	}
	if len(duringLoss) != 2 || status.Code(duringLoss[0]) != codes.FailedPrecondition || status.Code(duringLoss[1]) != codes.Unavailable {
		t.Fatalf("while a declared n1 lost, b's renewal and welcome = %v, want FailedPrecondition and Unavailable", duringLoss)
	}
	// Declared: the node may be welcomed again (and is reconciled).
	if _, _, err := b.admit(ctx, hello("n1", 1, &atev1.NodeWorker{Name: "w1"}), func() {}); err != nil {
		t.Fatalf("welcome after the loss was declared = %v", err)
	}
}

// TestNodeStopsServingBeforeItIsDeclaredLost: everything the node sends
// to the API server is held (a one-way partition: the node still hears
// the API server). The node stops serving before the API server declares
// it lost, by its own clock from its last renewed heartbeat, though every
// heartbeat it sends still leaves without an error.
func TestNodeStopsServingBeforeItIsDeclaredLost(t *testing.T) {
	_, p, servingAtLoss := welcomedNode(t, nil)
	p.Partition(true)
	select {
	case serving := <-servingAtLoss:
		if serving {
			t.Fatal("the node still served when the API server declared it lost")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the node was not declared lost within 10 s of its partition")
	}
}

// welcomedNode runs a fake node, its agent and one registry (heartbeat
// 50 ms, loss deadline 500 ms) over an in-process transport until the
// test ends, and returns once the node serves. The agent dials the
// registry through dial(p) (nil: the transport's own DialRegistry).
// servingAtLoss receives whether the node served when the registry
// declared it lost.
func welcomedNode(t *testing.T, dial func(p *InProcess) func(string) (*grpc.ClientConn, error)) (n *node.Node, p *InProcess, servingAtLoss <-chan bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	n = newFakeNode(t, ctx, dir)
	reg, err := NewRegistry(ctx, RegistryConfig{Store: st, Heartbeat: 50 * time.Millisecond, LostAfter: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	atLoss := make(chan bool, 1)
	reg.SetWorkflows(&onLost{lostRecorder: &lostRecorder{st: st}, hook: func() {
		select {
		case atLoss <- n.Serving():
		default:
		}
	}})
	p = NewInProcess()
	dialer := p.DialRegistry
	if dial != nil {
		dialer = dial(p)
	}
	agent := NewAgent(AgentConfig{Node: n, Replicas: p.Replicas, Dial: dialer, Address: InProcessAddress, TunnelAddr: "127.0.0.1:1"})
	first := make(chan error, 1)
	serveAll(t, ctx, cancel, p, reg, agent, st, first)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the node to serve once welcomed", n.Serving)
	return n, p, atLoss
}

// serveAll runs p's server for reg and agent's node, reg and agent until
// the test ends, when it cancels ctx (cancel), waits for them and closes
// reg, the node and st. first is Agent.Run's.
func serveAll(t *testing.T, ctx context.Context, cancel context.CancelFunc, p *InProcess, reg *Registry, agent *Agent, st store.Store, first chan<- error) {
	t.Helper()
	var wg sync.WaitGroup
	for _, run := range []func() error{
		func() error { return p.Serve(ctx, reg, NewServer(agent.cfg.Node, agent)) },
		func() error { return reg.Run(ctx) },
		func() error { return agent.Run(ctx, first) },
	} {
		wg.Go(func() {
			if err := run(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		reg.Close()
		agent.cfg.Node.Shutdown(context.Background())
		st.Close()
	})
}

// TestDrainNodeReachesEveryReplica: DrainNode through one replica (a);
// the other (b), which was not asked, stops placing actors on the node
// too, since the node reports the drain to every replica.
func TestDrainNodeReachesEveryReplica(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	n := newFakeNode(t, ctx, dir)
	paths := map[string]*InProcess{"a": NewInProcess(), "b": NewInProcess()}
	regs := map[string]*Registry{}
	for name, p := range paths {
		reg, err := NewRegistry(ctx, RegistryConfig{Store: st, Shared: true, Heartbeat: 50 * time.Millisecond,
			LostAfter: 500 * time.Millisecond, Dial: p.DialNode})
		if err != nil {
			t.Fatal(err)
		}
		reg.SetWorkflows(&lostRecorder{st: st})
		regs[name] = reg
	}
	agent := NewAgent(AgentConfig{Node: n, Address: InProcessAddress, TunnelAddr: "127.0.0.1:1",
		Replicas: func(context.Context) ([]string, error) { return []string{"a", "b"}, nil },
		Dial:     func(addr string) (*grpc.ClientConn, error) { return paths[addr].DialRegistry(addr) }})
	var wg sync.WaitGroup
	for name, p := range paths {
		wg.Go(func() { _ = p.Serve(ctx, regs[name], NewServer(n, agent)) })
		wg.Go(func() { _ = regs[name].Run(ctx) })
	}
	wg.Go(func() { _ = agent.Run(ctx, nil) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, reg := range regs {
			reg.Close()
		}
		n.Shutdown(context.Background())
		st.Close()
	})
	for name, reg := range regs {
		testwait.Until(t, "the node welcomed by replica "+name, func() bool { return slices.Equal(reg.ByLoad(), []string{"n1"}) })
	}
	if _, err := regs["a"].Drain(ctx, "n1", "pod terminating"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "replica b to stop placing on the drained node", func() bool { return len(regs["b"].ByLoad()) == 0 })
	nodes, err := regs["b"].List(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].GetPhase() != atev1.Node_DRAINING {
		t.Fatalf("replica b's nodes %v (%v), want n1 DRAINING", nodes, err)
	}
}

// newFakeNode is a node of one worker on the fake sandbox runtime,
// fenced until welcomed, as the node's assembly makes it.
func newFakeNode(t *testing.T, ctx context.Context, dir string) *node.Node {
	t.Helper()
	snaps, err := snapshot.NewLocal(filepath.Join(dir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	paused, err := snapshot.NewLocal(filepath.Join(dir, "paused"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(ctx, node.Config{Name: "n1", Workers: 1, WorkerPrefix: "n1", SandboxClass: "fake",
		Runtime: fake.New(fake.Config{}), Setup: fake.Setup, Snapshots: snaps, Paused: paused,
		StateDir: filepath.Join(dir, "state"), TunnelAddr: "127.0.0.1:1", NoStandbys: true})
	if err != nil {
		t.Fatal(err)
	}
	n.Fence(true)
	return n
}

// deafConn is the node's side of a connection to the registry that,
// while deaf holds an open channel, receives nothing (its reads wait
// until it is closed) while its writes go through: a one-way partition,
// registry to node dropped.
type deafConn struct {
	net.Conn
	deaf *atomic.Pointer[chan struct{}]
}

func (c deafConn) Read(b []byte) (int, error) {
	if healed := c.deaf.Load(); healed != nil {
		<-*healed
	}
	return c.Conn.Read(b)
}

// TestNodeThatHearsNoRenewalIsLost: the registry hears the node's
// heartbeats but the node hears none of its renewals. The node stops
// serving when its own count of the lease runs out; then it marks its
// heartbeats lease_lapsed, so the registry neither renews the lease on
// them nor counts them as hearing it, and declares it lost: its actors
// are not left assigned to a node that serves nothing for as long as
// the partition lasts.
func TestNodeThatHearsNoRenewalIsLost(t *testing.T) {
	var deaf atomic.Pointer[chan struct{}]
	n, _, servingAtLoss := welcomedNode(t, func(p *InProcess) func(string) (*grpc.ClientConn, error) {
		return func(string) (*grpc.ClientConn, error) {
			return grpc.NewClient("passthrough:///"+InProcessAddress, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
					c, err := p.ln.DialContext(ctx)
					if err != nil {
						return nil, err
					}
					return deafConn{Conn: c, deaf: &deaf}, nil
				}))
		}
	})
	healed := make(chan struct{})
	t.Cleanup(func() { close(healed) }) // before welcomedNode's: its shutdown reads
	deaf.Store(&healed)
	select {
	case serving := <-servingAtLoss:
		if serving || n.Serving() {
			t.Fatal("the node still served when it was declared lost")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the node, heard but hearing no renewals, was not declared lost within 20 loss deadlines")
	}
}
