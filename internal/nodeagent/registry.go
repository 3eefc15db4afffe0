package nodeagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
)

// Defaults for RegistryConfig.
const (
	DefaultHeartbeat = time.Second
	DefaultLostAfter = 5 * time.Second
)

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	Store store.Store
	// Heartbeat is how often nodes heartbeat (DefaultHeartbeat); a node
	// silent for LostAfter (DefaultLostAfter) is lost.
	Heartbeat, LostAfter time.Duration
	// Dial connects to the NodeAgent address of node, the node that
	// registered (its certificate named it): the agent there must prove
	// it is that node (pki.Transport.NodeDialOption). Default plain gRPC.
	Dial func(node, addr string) (*grpc.ClientConn, error)
	// Snapshots is the API server's durable snapshot store URL; a node
	// announcing another is refused (FAILED_PRECONDITION). Empty checks
	// nothing.
	Snapshots string
	// Shared says other API server replicas use the store: their
	// workflows run meanwhile, so a claimed worker a node's hello does not
	// list may be a start under way (not a loss), and a node this process
	// has not heard from yet may be talking to them.
	Shared bool
	// SandboxClass is the class the API server's templates run; a node
	// announcing another is refused (FAILED_PRECONDITION). Empty checks
	// nothing.
	SandboxClass string
	// OneProcess says the nodes run in this process, over a store no
	// other process uses (`ate up`: bolt's file lock, or its
	// installation lease over PostgreSQL): a node's earlier incarnation
	// died with the last process, so its lease is not waited out.
	OneProcess bool
	Logger     *slog.Logger
}

// Registry is the API server's side of the node protocol: the
// NodeRegistry service nodes register with, the nodeapi.Nodes the
// workflows find them through, and the caller of the workflows'
// nodeapi.Events with what the nodes report. A node is live from its
// welcome until it leaves or is declared lost (no heartbeat for
// LostAfter); a lost node's workers leave the pool and its actors go
// CRASHED at their last durable snapshot (Events.WorkersLost). A node
// that registers again with a new epoch is a new process: whatever the
// store said it hosted is gone. Sandboxes a node reports hosting that
// the store does not give it are stopped (stop orders), so a node back
// from a partition never serves an actor that moved on.
type Registry struct {
	atev1.UnimplementedNodeRegistryServer
	cfg RegistryConfig
	log *slog.Logger

	mu sync.Mutex
	// wf are the workflows told what the nodes report (SetWorkflows).
	wf nodeapi.Events
	// selfCall answers SelfCall and SetSelfAlarm (selfcall.go,
	// selfalarm.go); nil: UNIMPLEMENTED.
	selfCall nodeapi.SelfCallFunc

	members  map[string]*member
	byWorker map[string]string // worker → node, live members only
	// draining names the nodes drained by Drain (DrainNode), with why:
	// they stay DRAINING across re-registrations until Remove.
	draining map[string]string
	// declarer is this registry's holder name for the lease of a node it
	// declares lost (lease.go).
	declarer string
}

// member is one node as the registry knows it.
type member struct {
	name, address, tunnel string
	epoch                 int64
	phase                 atev1.Node_Phase
	message               string
	remote                *Remote
	workers               []string
	lastHeard             time.Time
	// leaseToken is the node's lease token this replica took or renewed
	// at its welcome; renewed is when this replica last renewed it.
	leaseToken int64
	renewed    time.Time
	// lapsed: the node's last heartbeat said its lease ran out by its
	// own count (NodeHeartbeat.lease_lapsed). Until one says otherwise
	// nothing it sends counts as hearing it, so its silence can make it
	// lost.
	lapsed bool
	// end closes the node's current stream; nil while none is open.
	end context.CancelFunc
	// send sends on that stream (one at a time); nil while none is open.
	send func(*atev1.RegistryMessage) error
	// drainOnce runs this incarnation's drain once, whoever asks first
	// (DrainNode or the node's own DRAIN event); drainDone is closed when
	// it has finished, with drainErr its outcome.
	drainOnce sync.Once
	drainDone chan struct{}
	drainErr  error
}

// drain starts m's drain (once: SuspendNode of its actors) and returns a
// channel closed when it has finished; m.drainErr is then its error.
func (r *Registry) drain(ctx context.Context, m *member, wf nodeapi.Events, reason string) <-chan struct{} {
	m.drainOnce.Do(func() {
		m.drainDone = make(chan struct{})
		r.log.InfoContext(ctx, "node draining", "node", m.name, "reason", reason)
		go func() {
			defer close(m.drainDone)
			if err := wf.SuspendNode(context.WithoutCancel(ctx), m.name); err != nil {
				r.log.Warn("drain node", "node", m.name, "err", err)
				m.drainErr = err
			}
		}()
	})
	return m.drainDone
}

// NewRegistry returns a registry; call SetWorkflows before serving and Run
// for the loss deadline. Nodes with workers in the store (registered with
// an earlier process) start PENDING: they are live once they register,
// and lost if they do not within LostAfter of Run.
func NewRegistry(ctx context.Context, cfg RegistryConfig) (*Registry, error) {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.LostAfter <= 0 {
		cfg.LostAfter = DefaultLostAfter
	}
	if cfg.LostAfter < 2*cfg.Heartbeat {
		return nil, fmt.Errorf("node loss deadline %s must be at least two heartbeats (%s)", cfg.LostAfter, cfg.Heartbeat)
	}
	if cfg.Dial == nil {
		cfg.Dial = func(_, addr string) (*grpc.ClientConn, error) {
			return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Registry{cfg: cfg, log: cfg.Logger, members: map[string]*member{}, byWorker: map[string]string{},
		declarer: fmt.Sprintf("lost/%d", time.Now().UnixNano())}
	workers, err := cfg.Store.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for _, w := range workers {
		m := r.members[w.Node]
		if m == nil {
			m = &member{name: w.Node, phase: atev1.Node_PENDING, lastHeard: now, tunnel: w.TunnelAddr}
			r.members[w.Node] = m
		}
		m.workers = append(m.workers, w.Name)
	}
	return r, nil
}

// SetWorkflows connects the registry to the workflows
// (*lifecycle.Manager, built with the registry as its nodeapi.Nodes),
// which it tells what the nodes report.
func (r *Registry) SetWorkflows(wf nodeapi.Events) {
	r.mu.Lock()
	r.wf = wf
	r.mu.Unlock()
}

func (r *Registry) workflows() nodeapi.Events {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wf
}

var _ nodeapi.Nodes = (*Registry)(nil)

// Get implements nodeapi.Nodes: READY and DRAINING nodes are live.
func (r *Registry) Get(name string) (nodeapi.Node, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.members[name]
	if m == nil || !m.live() {
		return nil, false
	}
	return m.remote, true
}

// ForWorker implements nodeapi.Nodes.
func (r *Registry) ForWorker(worker string) (nodeapi.Node, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.members[r.byWorker[worker]]
	if m == nil || !m.live() {
		return nil, false
	}
	return m.remote, true
}

// Lost implements nodeapi.Nodes: no member owns worker but LOST ones
// (and, with OneProcess, PENDING ones: the last process's, which died
// with it).
func (r *Registry) Lost(worker string) bool {
	r.mu.Lock()
	if _, ok := r.byWorker[worker]; ok {
		r.mu.Unlock()
		return false
	}
	for _, m := range r.members {
		pending := m.phase == atev1.Node_PENDING && !r.cfg.OneProcess
		if (m.live() || pending) && slices.Contains(m.workers, worker) {
			r.mu.Unlock()
			return false // known from the store, not heard yet
		}
	}
	r.mu.Unlock()
	if !r.cfg.Shared {
		return true
	}
	return !r.learnWorker(worker)
}

// learnWorker looks worker up in the store and, if a node registered it
// that this replica has not heard from, notes the node as PENDING (known
// from the store, with the grace such nodes get) and reports true. A
// replica that started before the node registered with another replica
// knew nothing of it, and took a suspend of an actor there for a lost
// sandbox: the actor turned CRASHED right after answering its first
// requests (the real-cluster suite, now and then). A store that cannot
// be read is no proof of loss either.
func (r *Registry) learnWorker(worker string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), learnWorkerTimeout)
	defer cancel()
	w, err := r.cfg.Store.GetWorker(ctx, worker)
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	if err != nil {
		r.log.WarnContext(ctx, "look up a worker no node here owns; not taking it for lost", "worker", worker, "err", err)
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.members[w.Node]
	switch {
	case m == nil:
		m = &member{name: w.Node, phase: atev1.Node_PENDING, lastHeard: time.Now(), tunnel: w.TunnelAddr}
		r.members[w.Node] = m
	case m.phase == atev1.Node_LOST:
		return false // declared lost here; its next registration brings it back
	}
	if !slices.Contains(m.workers, worker) {
		m.workers = append(m.workers, worker)
	}
	return true
}

// learnWorkerTimeout bounds learnWorker's store read.
const learnWorkerTimeout = 5 * time.Second

// ByLoad implements nodeapi.Nodes: READY nodes by hosted actors per
// worker, fewest first, then by name.
func (r *Registry) ByLoad() []string {
	r.mu.Lock()
	type load struct {
		name string
		frac float64
	}
	var ls []load
	for _, m := range r.members {
		if m.phase == atev1.Node_READY && len(m.workers) > 0 {
			ls = append(ls, load{m.name, float64(m.remote.hosted()) / float64(len(m.workers))})
		}
	}
	r.mu.Unlock()
	slices.SortFunc(ls, func(a, b load) int { return cmp.Or(cmp.Compare(a.frac, b.frac), cmp.Compare(a.name, b.name)) })
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.name
	}
	return out
}

// All implements nodeapi.Nodes.
func (r *Registry) All() []nodeapi.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []nodeapi.Node
	for _, m := range r.members {
		if m.live() {
			out = append(out, m.remote)
		}
	}
	return out
}

func (m *member) live() bool { return m.phase == atev1.Node_READY || m.phase == atev1.Node_DRAINING }

// List returns every node the registry knows, by name, for ListNodes;
// free counts come from the store.
func (r *Registry) List(ctx context.Context) ([]*atev1.Node, error) {
	workers, err := r.cfg.Store.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	free := map[string]int32{}
	for _, w := range workers {
		if w.Free() {
			free[w.Node]++
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*atev1.Node
	for _, name := range slices.Sorted(maps.Keys(r.members)) {
		m := r.members[name]
		out = append(out, m.toProto(free[m.name]))
	}
	return out, nil
}

// toProto is m as ListNodes reports it, free of its workers free: its
// phase as the enum and, for clients older than it, as the deprecated
// phase_name.
func (m *member) toProto(free int32) *atev1.Node {
	n := &atev1.Node{Name: m.name, Address: m.address, TunnelAddress: m.tunnel, Epoch: m.epoch, Message: m.message,
		LastHeartbeat: timestamppb.New(m.lastHeard)}
	n.FillPhase(m.phase)
	if m.phase != atev1.Node_LOST {
		n.Workers, n.FreeWorkers = int32(len(m.workers)), free
	}
	return n
}

// Close closes the connections to the nodes. Call it once Run has
// returned and the workflows that use them have ended.
func (r *Registry) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.members {
		if m.remote != nil {
			m.remote.close()
		}
	}
}

// pendingSharedGrace multiplies LostAfter for a PENDING node over a
// shared store (RegistryConfig.Shared).
const pendingSharedGrace = 6

// Run declares lost every node silent for LostAfter, checking every
// heartbeat interval, until ctx ends.
//
// A check that comes late by more than two heartbeats means this process
// itself stood still (SIGSTOP, a long pause, a frozen VM): the silence it
// measures is its own, and the nodes' heartbeats are still queued in the
// socket. Such a check gives every node a fresh deadline instead of
// declaring it lost, or a replica waking from a stall would crash actors
// that other replicas run on healthy nodes.
func (r *Registry) Run(ctx context.Context) error {
	tick := time.NewTicker(r.cfg.Heartbeat)
	defer tick.Stop()
	lastCheck := time.Now()
	// Drains recorded through other replicas (Drain), within half a
	// loss deadline.
	go func() {
		t := time.NewTicker(max(r.cfg.Heartbeat, r.cfg.LostAfter/2))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.syncDrains(ctx)
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			// End the nodes' streams too: a graceful stop of the gRPC
			// server waits for every call, and these never end by
			// themselves. The nodes retry until an API server is back.
			// Their connections stay open (Close) for the workflows the
			// graceful stop lets finish.
			r.mu.Lock()
			for _, m := range r.members {
				if m.end != nil {
					m.end()
				}
			}
			r.mu.Unlock()
			return nil
		case <-tick.C:
		}
		now := time.Now()
		late := now.Sub(lastCheck)
		stalled := late > 2*r.cfg.Heartbeat+r.cfg.Heartbeat/2
		lastCheck = now
		r.mu.Lock()
		if stalled {
			for _, m := range r.members {
				if m.phase != atev1.Node_LOST {
					m.lastHeard = now
				}
			}
			r.mu.Unlock()
			r.log.Warn("node loss check ran late: this process stood still; nodes get a fresh deadline", "late", late)
			continue
		}
		var silent []string
		for _, m := range r.members {
			deadline := r.cfg.LostAfter
			if m.phase == atev1.Node_PENDING && r.cfg.Shared {
				// Never heard by this process, which just started: the
				// node may be busy re-registering, or talking to the
				// other replicas, which would declare it lost themselves.
				deadline = pendingSharedGrace * r.cfg.LostAfter
			}
			if m.phase != atev1.Node_LOST && now.Sub(m.lastHeard) > deadline {
				silent = append(silent, m.name)
			}
		}
		r.mu.Unlock()
		for _, name := range silent {
			r.declareIfLapsed(ctx, name, fmt.Sprintf("no heartbeat for %s", r.cfg.LostAfter))
		}
	}
}

// declareLost marks node lost (if it is still the incarnation epoch, 0 =
// any) and hands its workers' actors to WorkersLost.
func (r *Registry) declareLost(ctx context.Context, name string, epoch int64, why string) {
	r.mu.Lock()
	m := r.members[name]
	if m == nil || m.phase == atev1.Node_LOST || (epoch != 0 && m.epoch != epoch) {
		r.mu.Unlock()
		return
	}
	m.phase, m.message = atev1.Node_LOST, why
	for _, w := range m.workers {
		delete(r.byWorker, w)
	}
	if m.end != nil {
		m.end()
	}
	wf := r.wf
	r.mu.Unlock()
	r.log.WarnContext(ctx, "node lost", "node", name, "why", why)
	workers, err := r.workersOf(ctx, name)
	if err == nil && wf != nil {
		err = wf.WorkersLost(ctx, workers, "node "+name+" lost ("+why+"): memory since the last snapshot was lost")
	}
	if err != nil {
		r.log.WarnContext(ctx, "record lost node", "node", name, "err", err)
	}
}

func (r *Registry) workersOf(ctx context.Context, node string) ([]*store.Worker, error) {
	all, err := r.cfg.Store.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(w *store.Worker) bool { return w.Node != node }), nil
}

// Register implements atev1.NodeRegistryServer: one node's session.
func (r *Registry) Register(stream atev1.NodeRegistry_RegisterServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	in, err := stream.Recv()
	if err != nil {
		return err
	}
	h := in.GetHello()
	if err := validHello(h); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	bound, err := checkNodeCaller(ctx, h.GetNode())
	if err != nil {
		return err
	}
	if bound {
		if err := r.checkHelloWorkers(ctx, h); err != nil {
			return err
		}
	}
	m, stops, err := r.admit(ctx, h, cancel)
	if err != nil {
		return err
	}
	defer func() {
		r.mu.Lock()
		m.end, m.send = nil, nil // no stream open: another incarnation may take the name once this one is silent
		r.mu.Unlock()
	}()
	// Sent from this loop and from a drain's goroutine: one at a time.
	var sendMu sync.Mutex
	send := func(msg *atev1.RegistryMessage) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(msg)
	}
	for _, s := range stops {
		if err := send(&atev1.RegistryMessage{Msg: &atev1.RegistryMessage_Stop{Stop: s}}); err != nil {
			return err
		}
	}
	if err := send(&atev1.RegistryMessage{Msg: &atev1.RegistryMessage_Welcome{Welcome: &atev1.RegistryWelcome{
		HeartbeatMs: r.cfg.Heartbeat.Milliseconds(), LostAfterMs: r.cfg.LostAfter.Milliseconds(),
		LeaseToken: m.leaseToken, LeaseMs: r.cfg.LostAfter.Milliseconds()}}}); err != nil {
		return err
	}
	r.log.InfoContext(ctx, "node registered", "node", h.GetNode(), "epoch", h.GetEpoch(), "address", h.GetAddress(),
		"workers", len(h.GetWorkers()))
	r.mu.Lock()
	m.send = send
	reason, drained := r.draining[m.name]
	r.mu.Unlock()
	if drained {
		// Drained here before this session: the node tells every
		// replica again.
		if err := send(drainOrder(reason)); err != nil {
			return err
		}
	}
	// Receive on a goroutine, so that ending ctx (member.end: the node
	// was declared lost, or the API server stops) ends the stream even
	// while a Recv blocks: returning cancels the stream, which ends it.
	msgs := make(chan *atev1.NodeMessage)
	go func() {
		defer close(msgs)
		for {
			in, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case msgs <- in:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var in *atev1.NodeMessage
		select {
		case <-ctx.Done():
			return status.Error(codes.Unavailable, "node session ended by the API server")
		case got, ok := <-msgs:
			if !ok {
				// The stream broke; the node is lost only if it stays
				// silent past the deadline (Run), unless it is already.
				return nil
			}
			in = got
		}
		r.mu.Lock()
		current := r.members[m.name] == m && m.epoch == h.GetEpoch() && m.phase != atev1.Node_LOST
		if hb := in.GetHeartbeat(); current && hb != nil {
			m.lapsed = hb.GetLeaseLapsed()
		}
		if current && !m.lapsed {
			m.lastHeard = time.Now()
		}
		wf := r.wf
		r.mu.Unlock()
		if !current {
			return status.Error(codes.FailedPrecondition, "node "+m.name+" was declared lost; register again")
		}
		if bound {
			if err := checkReport(m, in); err != nil {
				r.log.WarnContext(ctx, "node session ended: it reported another node's worker", "node", m.name, "err", err)
				return err
			}
		}
		switch msg := in.GetMsg().(type) {
		case *atev1.NodeMessage_Heartbeat:
			m.remote.heard(msg.Heartbeat)
			if err := r.renew(ctx, m, msg.Heartbeat, send); err != nil {
				r.log.WarnContext(ctx, "node session ended", "node", m.name, "err", err)
				return err
			}
		case *atev1.NodeMessage_Event:
			r.event(ctx, m, wf, msg.Event, send)
		}
	}
}

// event acts on one of m's events. stream is m's, for the one message
// sent after the welcome: the answer to a drain, from the drain's own
// goroutine (the Register loop only receives by then).
func (r *Registry) event(ctx context.Context, m *member, wf nodeapi.Events, ev *atev1.NodeEvent, send func(*atev1.RegistryMessage) error) {
	if wf == nil {
		return
	}
	switch ev.GetKind() {
	case atev1.NodeEvent_EXITED:
		m.remote.clearActivity(ev.GetWorker(), ev.GetActorUid())
		go wf.WorkerExited(ev.GetWorker(), ev.GetActorUid())
	case atev1.NodeEvent_IDLE:
		wf.WorkerIdle(ev.GetWorker())
	case atev1.NodeEvent_SELF_REQUEST:
		if action, err := checkpoint.ParseAction(ev.GetAction()); err == nil {
			wf.SelfRequest(ev.GetWorker(), ev.GetActorUid(), action)
		}
	case atev1.NodeEvent_DRAIN:
		r.mu.Lock()
		if m.phase == atev1.Node_READY {
			m.phase = atev1.Node_DRAINING
		}
		r.mu.Unlock()
		// A drain DrainNode started (the worker Pod began terminating) is
		// answered when it ends: the node waits for every replica's answer
		// before it leaves, and got none from here before.
		finished := r.drain(ctx, m, wf, "the node asked")
		go func() {
			<-finished
			done := &atev1.Drained{}
			if m.drainErr != nil {
				done.Error = m.drainErr.Error()
			}
			// A node whose stream broke meanwhile drains again on its
			// next session and hears then.
			_ = send(&atev1.RegistryMessage{Msg: &atev1.RegistryMessage_Drained{Drained: done}})
		}()
	case atev1.NodeEvent_BUILD_PROGRESS:
		if p := ev.BuildPhaseOrText(); p != atev1.BuildPhase_BUILD_PHASE_UNSPECIFIED {
			m.remote.buildProgress(ev.GetTemplateUid(), p)
		}
	case atev1.NodeEvent_LEAVE:
		go func() {
			ctx := context.WithoutCancel(ctx)
			r.declareLost(ctx, m.name, m.epoch, "left")
			// Gone for good: its next start need not wait the lease out.
			if err := r.cfg.Store.ReleaseLease(ctx, nodeLeaseKey(m.name), r.leaseHolder(m.name, m.epoch)); err != nil {
				r.log.Warn("release the lease of a node that left", "node", m.name, "err", err)
			}
		}()
	}
}

// nameTaken refuses a node whose name another incarnation holds, one
// heard from less than LostAfter ago. The refusal carries, as RetryInfo,
// when that one will have been silent for LostAfter if it is not heard
// again: a restarted node whose predecessor died with its stream still
// open (a proxy or a half-open connection keeps it) waits that long and
// is admitted, where a second live process under the name, still
// heartbeating, is refused again and gives up.
func nameTaken(name, address string, silentIn time.Duration) error {
	st := status.Newf(codes.AlreadyExists,
		"node %s is already registered from %s and heartbeating; stop it first or give this node another --name", name, address)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(max(silentIn, 0))}); err == nil {
		st = d
	}
	return st.Err()
}

// admit registers the node of hello h: it refuses a name live under
// another epoch and workers already registered by another node; a new
// epoch declares the previous incarnation lost first. It records the
// workers, and returns stop orders for sandboxes the store does not give
// the node.
func (r *Registry) admit(ctx context.Context, h *atev1.NodeHello, end context.CancelFunc) (*member, []*atev1.StopOrder, error) {
	name := h.GetNode()
	if want := r.cfg.Snapshots; want != "" && h.GetSnapshots() != want {
		return nil, nil, status.Errorf(codes.FailedPrecondition,
			"node %s uses snapshot store %q, the API server %q: give the node the API server's --snapshots, or no snapshot could be found across them", name, h.GetSnapshots(), want)
	}
	if want := r.cfg.SandboxClass; want != "" && h.GetSandboxClass() != want {
		return nil, nil, status.Errorf(codes.FailedPrecondition,
			"node %s runs sandbox class %q, the API server %q: start the node with --sandbox-class %s, or its workers would run templates built for another class", name, h.GetSandboxClass(), want, want)
	}
	r.mu.Lock()
	prev := r.members[name]
	if prev != nil && prev.live() && prev.epoch != h.GetEpoch() && time.Since(prev.lastHeard) <= r.cfg.LostAfter && prev.end != nil {
		silentIn := r.cfg.LostAfter - time.Since(prev.lastHeard)
		r.mu.Unlock()
		return nil, nil, nameTaken(name, prev.address, silentIn)
	}
	for _, w := range h.GetWorkers() {
		if owner, ok := r.byWorker[w.GetName()]; ok && owner != name {
			r.mu.Unlock()
			return nil, nil, status.Errorf(codes.AlreadyExists,
				"worker %s is already registered by node %s; give this node another --worker-prefix", w.GetName(), owner)
		}
	}
	// A live member's epoch is known: the same one back is the same
	// process reconnecting, another a restart, whose predecessor's
	// sandboxes are gone. A PENDING member (known only from the store,
	// after this API server restarted) or a LOST one has no epoch to go
	// by: what the hello says each worker hosts decides, worker by worker.
	known := prev != nil && prev.live()
	r.mu.Unlock()
	// The node's lease first: a new incarnation waits until the last one's
	// has run out (it may still serve, elsewhere, until then), and a node
	// a replica is declaring lost until that is done.
	token, kept, err := r.takeLease(ctx, h)
	if err != nil {
		return nil, nil, err
	}
	// The same process back, its lease held throughout: what the store
	// gives it is what it had. A lease that lapsed meanwhile may have
	// let a replica declare it lost: reconcile as for a new process.
	sameProcess := known && prev.epoch == h.GetEpoch() && kept
	if known && prev.epoch != h.GetEpoch() {
		r.declareLost(ctx, name, prev.epoch, "restarted")
	}

	conn, err := r.cfg.Dial(name, h.GetAddress())
	if err != nil {
		return nil, nil, status.Errorf(codes.InvalidArgument, "node address %s: %v", h.GetAddress(), err)
	}
	stops, err := r.reconcile(ctx, h, !sameProcess)
	if err != nil {
		_ = conn.Close()
		return nil, nil, status.Errorf(codes.Unavailable, "register node %s: %v", name, err)
	}
	m := &member{name: name, address: h.GetAddress(), tunnel: h.GetTunnelAddress(), epoch: h.GetEpoch(),
		phase: atev1.Node_READY, remote: newRemote(name, conn), lastHeard: time.Now(), end: end,
		leaseToken: token, renewed: time.Now()}
	for _, w := range h.GetWorkers() {
		m.workers = append(m.workers, w.GetName())
		if w.GetHostedActorUid() != "" {
			m.remote.hosts(w.GetName(), w.GetHostedActorUid())
		}
	}
	r.loadDrains(ctx)
	r.mu.Lock()
	if old := r.members[name]; old != nil && old.remote != nil && old.remote != m.remote {
		old.remote.close()
	}
	r.members[name] = m
	for _, w := range m.workers {
		r.byWorker[w] = name
	}
	reason, drained := r.draining[name]
	if drained {
		m.phase = atev1.Node_DRAINING
	}
	r.mu.Unlock()
	if drained {
		// Drained by DrainNode before this session: drain this
		// incarnation too (it may host actors placed meanwhile by
		// another replica).
		if _, err := r.Drain(ctx, name, reason); err != nil {
			r.log.WarnContext(ctx, "drain re-registered node", "node", name, "err", err)
		}
	}
	return m, stops, nil
}

// reconcile writes h's workers to the store and compares what the node
// hosts with what the store gives it. Workers the node no longer has, and
// (with checkClaims: unless this is the same process reconnecting, whose
// hello may predate a start under way) claimed workers whose actor the
// node does not host, go to WorkersLost.
func (r *Registry) reconcile(ctx context.Context, h *atev1.NodeHello, checkClaims bool) ([]*atev1.StopOrder, error) {
	stored, err := r.workersOf(ctx, h.GetNode())
	if err != nil {
		return nil, err
	}
	byName := map[string]*store.Worker{}
	for _, w := range stored {
		byName[w.Name] = w
	}
	var gone, notHosted []*store.Worker
	var stops []*atev1.StopOrder
	have := map[string]bool{}
	for _, w := range h.GetWorkers() {
		have[w.GetName()] = true
		sw := byName[w.GetName()]
		hosted := w.GetHostedActorUid()
		if sw != nil && !sw.Free() && sw.ActorUID != hosted && checkClaims {
			notHosted = append(notHosted, sw)
		}
		if hosted != "" && (sw == nil || sw.ActorUID != hosted) {
			stops = append(stops, &atev1.StopOrder{Worker: w.GetName(), ActorUid: hosted})
		}
	}
	for _, sw := range stored {
		if !have[sw.Name] {
			gone = append(gone, sw)
		}
	}
	if wf := r.workflows(); wf != nil {
		// Crash the actors first, then re-register (below): a lost
		// worker that is still in the hello comes back free.
		if len(gone) > 0 {
			if err := wf.WorkersLost(ctx, gone, "node "+h.GetNode()+" no longer has the worker: memory since the last snapshot was lost"); err != nil {
				return nil, err
			}
		}
		if len(notHosted) > 0 {
			// After the welcome, not before: each takes its actor's lock,
			// which a workflow of this replica may hold while it waits
			// for a free worker — one this very registration brings
			// back. Waiting here deadlocked the two until the workflow's
			// deadline (30 s; seen in TestHARollingRestart). Meanwhile a
			// request for such an actor reaches a node that refuses it
			// as stale (421) until the actor is CRASHED.
			go func() {
				if err := wf.ClaimsNotHosted(context.WithoutCancel(ctx), h.GetNode(), notHosted, "node "+h.GetNode()+" no longer runs it: memory since the last snapshot was lost"); err != nil {
					r.log.Warn("crash actors the node no longer runs", "node", h.GetNode(), "err", err)
				}
			}()
		}
	}
	for _, w := range h.GetWorkers() {
		if err := r.cfg.Store.PutWorker(ctx, &store.Worker{Name: w.GetName(), Node: h.GetNode(), TunnelAddr: h.GetTunnelAddress(),
			SandboxClass: h.GetSandboxClass(), Labels: w.GetLabels()}); err != nil {
			return nil, fmt.Errorf("worker %s: %w", w.GetName(), err)
		}
	}
	return stops, nil
}

func validHello(h *atev1.NodeHello) error {
	if h == nil {
		return fmt.Errorf("the first message must be a hello")
	}
	if err := names.ValidateLabel("node name", h.GetNode()); err != nil {
		return err
	}
	if h.GetAddress() == "" || h.GetTunnelAddress() == "" {
		return fmt.Errorf("node %s: hello without its agent or tunnel address", h.GetNode())
	}
	if h.GetEpoch() <= 0 {
		return fmt.Errorf("node %s: epoch must be positive", h.GetNode())
	}
	return nil
}
