package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/clock"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/nodeapi"
)

// AgentConfig configures an Agent.
type AgentConfig struct {
	// Node is the node agent announced; its workers are registered.
	Node *node.Node
	// Replicas returns the addresses of every API server replica now
	// (apidial.Replicas); the node keeps a session with each, and asks
	// again every ResolveEvery, so replicas that move or are added (a
	// Deployment's new Pods behind a headless Service) are found.
	Replicas func(ctx context.Context) ([]string, error)
	// Dial connects to one replica's NodeRegistry.
	Dial func(addr string) (*grpc.ClientConn, error)
	// ResolveEvery defaults to 10 s. A broken session asks again sooner
	// (at most every resolveSoonest): in an API server's rolling update
	// the old replicas vanish within seconds, and waiting out ResolveEvery
	// left nodes with no live session long enough to fence themselves
	// (seen on a real cluster: 2 s of 421s for their actors).
	ResolveEvery time.Duration
	// Address is where this node's NodeAgent service listens, as the API
	// server must dial it (host:port).
	Address      string
	TunnelAddr   string
	SandboxClass string
	// Snapshots is the durable snapshot store's URL, which must be the
	// API server's (NodeHello.snapshots).
	Snapshots string
	Logger    *slog.Logger
}

// Agent keeps the node registered with every API server replica: per
// replica it holds one Register stream open (reconnecting with backoff
// when it breaks), sends the hello, a heartbeat every interval the API
// server asks for, and the node's events, and obeys stop orders. Every
// replica hears every event and heartbeat because whichever one runs an
// actor's workflow needs the node's view (standbys, tunnel activity);
// workflows are fenced by per-actor leases in the store, so an event two
// replicas act on is acted on once.
//
// The node serves only within its lease in the record store, as it
// counts it from the hellos and heartbeats the replicas answered
// (leaseHeld, lease.go): past it the tunnel refuses all traffic as stale,
// since a replica may then declare the node lost and resume its actors
// elsewhere. With API servers that keep no leases it fences itself when
// every replica has been out of touch for ¾ of the loss deadline.
type Agent struct {
	cfg   AgentConfig
	log   *slog.Logger
	epoch int64

	// linksMu guards links, by replica address.
	linksMu sync.Mutex
	links   map[string]*link

	// draining is set by Drain; every session then asks for the drain
	// again.
	draining atomic.Bool
	// resolveNow asks Run to find the replicas again now (a session broke).
	resolveNow chan struct{}

	// seq numbers heartbeats across sessions (NodeHeartbeat.seq).
	seq atomic.Int64
	// leaseToken is the token of the node's lease in the record store:
	// the highest welcomed (replicas renew it with the one the node
	// sends). Until when the lease surely holds, the node keeps
	// (node.ExtendLease).
	leaseToken atomic.Int64
}

// resolveSoonest spaces the re-resolutions broken sessions ask for.
const resolveSoonest = 250 * time.Millisecond

// resolveSoon asks Run to find the replicas again without waiting for
// ResolveEvery; it never blocks.
func (a *Agent) resolveSoon() {
	select {
	case a.resolveNow <- struct{}{}:
	default:
	}
}

// link is the agent's session with one API server replica.
type link struct {
	addr string
	conn *grpc.ClientConn
	// cancel ends the link's sessions (the replica went away); done is
	// closed once they have ended.
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	events []*atev1.NodeEvent
	// lastTouch is the last moment the replica heard us; lostAfter is its
	// loss deadline (zero until the first welcome); live is set while a
	// welcomed session is open.
	lastTouch time.Time
	lostAfter time.Duration
	live      bool
	wake      chan struct{}
	// beat asks for a heartbeat now (a standby became ready).
	beat    chan struct{}
	drained chan *atev1.Drained
	// leaseTTL is how long the replica's renewals of the node's lease
	// last (0: it keeps none); sent are the send times of heartbeats
	// whose renewal is not answered yet, by seq.
	leaseTTL time.Duration
	sent     map[int64]time.Time
}

// leaseMargin is how much of a lease the node gives up for safety: the
// store computes the expiry from when the renewal reached it, after the
// node's send, and clocks that tick at slightly different rates must
// not make the node serve past it.
func leaseMargin(ttl time.Duration) time.Duration { return ttl / 10 }

// leaseHeld records that the node's lease, with token, was taken or
// renewed for ttl no earlier than sent (by this process's clock): the
// node serves until sent + ttl - margin.
func (a *Agent) leaseHeld(token int64, ttl time.Duration, sent time.Time) {
	for cur := a.leaseToken.Load(); token > cur && !a.leaseToken.CompareAndSwap(cur, token); cur = a.leaseToken.Load() {
	}
	a.cfg.Node.ExtendLease(sent.Add(ttl - leaseMargin(ttl)))
}

// token is the node's lease token (0: none yet).
func (a *Agent) token() int64 { return a.leaseToken.Load() }

// sendHeartbeat numbers hb, remembers when it went (for the renewal
// the replica answers with its number) and sends it.
func (a *Agent) sendHeartbeat(l *link, stream atev1.NodeRegistry_RegisterClient, hb *atev1.NodeHeartbeat) error {
	hb.Seq, hb.LeaseToken = a.seq.Add(1), a.token()
	l.mu.Lock()
	// Well past its lease by its own count (half a lease: time for a
	// late renewal to arrive) the node asks for no more: if it cannot
	// hear the renewals (a one-way partition), the lease must lapse so
	// a replica declares it lost and its actors move, rather than being
	// kept renewed for a node that serves nothing. A renewal answered
	// for an earlier heartbeat still extends it (renewed).
	hb.LeaseLapsed = l.leaseTTL > 0 && a.cfg.Node.LeaseLapsedFor() >= l.leaseTTL/2
	if l.leaseTTL > 0 {
		// Unanswered ones older than a lease can no longer extend it.
		for seq, at := range l.sent {
			if time.Since(at) > l.leaseTTL {
				delete(l.sent, seq)
			}
		}
		l.sent[hb.Seq] = time.Now()
	}
	l.mu.Unlock()
	return stream.Send(&atev1.NodeMessage{Msg: &atev1.NodeMessage_Heartbeat{Heartbeat: hb}})
}

// renewed handles the replica's answer that the heartbeat numbered seq
// renewed the node's lease.
func (a *Agent) renewed(l *link, seq int64) {
	l.mu.Lock()
	sent, ok := l.sent[seq]
	delete(l.sent, seq)
	ttl := l.leaseTTL
	l.mu.Unlock()
	if ok && ttl > 0 {
		a.leaseHeld(0, ttl, sent)
	}
}

// NewAgent returns an agent for cfg.Node and makes it the node's
// handler of exits, idle workers and actors' self-service alarms and
// calls, which it forwards to the API server; call Run.
func NewAgent(cfg AgentConfig) *Agent {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.ResolveEvery <= 0 {
		cfg.ResolveEvery = 10 * time.Second
	}
	a := &Agent{cfg: cfg, log: log, epoch: time.Now().UnixNano(), links: map[string]*link{}, resolveNow: make(chan struct{}, 1)}
	n := cfg.Node
	n.SetUplink(a)
	return a
}

// current returns the links now.
func (a *Agent) current() []*link {
	a.linksMu.Lock()
	defer a.linksMu.Unlock()
	out := make([]*link, 0, len(a.links))
	for _, l := range a.links {
		out = append(out, l)
	}
	return out
}

// Report queues an event for every API server replica (exits, idle
// workers, self-service requests, the drain); it never blocks.
func (a *Agent) Report(ev *atev1.NodeEvent) {
	for _, l := range a.current() {
		l.report(ev)
	}
}

func (l *link) report(ev *atev1.NodeEvent) {
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// The Agent is its node's Uplink: what the node tells the control plane
// goes to the API server replicas, as events (WorkerExited, WorkerIdle)
// or calls (SelfCall).
var _ nodeapi.Uplink = (*Agent)(nil)

// WorkerExited implements nodeapi.Uplink.
func (a *Agent) WorkerExited(worker, actorUID string) {
	a.Report(&atev1.NodeEvent{Kind: atev1.NodeEvent_EXITED, Worker: worker, ActorUid: actorUID})
}

// WorkerIdle implements nodeapi.Uplink.
func (a *Agent) WorkerIdle(worker string) {
	a.Report(&atev1.NodeEvent{Kind: atev1.NodeEvent_IDLE, Worker: worker})
}

// selfRequest reports a self-requested checkpoint as an event, unchecked:
// the way of API servers from before the SelfCall RPC.
func (a *Agent) selfRequest(worker, actorUID string, action checkpoint.Action) {
	a.Report(&atev1.NodeEvent{Kind: atev1.NodeEvent_SELF_REQUEST, Worker: worker, ActorUid: actorUID, Action: action.String()})
}

// Backoff bounds between registration attempts.
const (
	minBackoff = 200 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// Run keeps the node registered with every replica until ctx ends. The
// first registration's outcome is sent on first (nil once any replica
// welcomed it, else the first refusal), so a caller can fail start-up on
// a name already live elsewhere instead of retrying forever; later breaks
// are retried, as are failures to find the replicas.
func (a *Agent) Run(ctx context.Context, first chan<- error) error {
	var once sync.Once
	report := func(err error) { once.Do(func() { first <- err }) }
	if first == nil {
		report = func(error) {}
	}
	defer func() {
		for _, l := range a.current() {
			l.cancel()
			<-l.done
			_ = l.conn.Close()
		}
	}()
	go a.beatOnChange(ctx)
	// Until the replicas are first found (a headless Service with no
	// ready Pod yet resolves to nothing), ask every second.
	for resolved := false; ; {
		addrs, err := a.cfg.Replicas(ctx)
		switch {
		case err != nil:
			a.log.Warn("finding the API server replicas failed; retrying", "err", err)
		case len(addrs) == 0:
			a.log.Warn("no API server replica found; retrying")
		default:
			resolved = true
			if err := a.follow(ctx, addrs, report); err != nil {
				a.log.Warn("connecting to the API server replicas failed; retrying", "err", err)
			}
		}
		wait := a.cfg.ResolveEvery
		if !resolved {
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		case <-a.resolveNow:
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(resolveSoonest):
			}
		}
	}
}

// beatOnChange asks every session for a heartbeat whenever the node's
// view changed in a way the API server must hear of at once
// (node.ViewChanged: a standby ready, an idle actor busy again), at most
// one per beatSpacing, until ctx ends.
func (a *Agent) beatOnChange(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.cfg.Node.ViewChanged():
		}
		for _, l := range a.current() {
			select {
			case l.beat <- struct{}{}:
			default:
			}
		}
		// A heartbeat lists every worker: a busy node's requests must
		// not turn into a stream of them.
		select {
		case <-ctx.Done():
			return
		case <-time.After(beatSpacing):
		}
	}
}

// beatSpacing is the least time between two heartbeats beatOnChange asks
// for.
const beatSpacing = 10 * time.Millisecond

// follow starts a link for every address in addrs without one and ends
// the links of addresses no longer there.
func (a *Agent) follow(ctx context.Context, addrs []string, first func(error)) error {
	want := map[string]bool{}
	for _, addr := range addrs {
		want[addr] = true
	}
	a.linksMu.Lock()
	var gone []*link
	for addr, l := range a.links {
		if !want[addr] {
			gone = append(gone, l)
			delete(a.links, addr)
		}
	}
	a.linksMu.Unlock()
	// Ended outside the lock: a link's goroutine reads the links.
	for _, l := range gone {
		a.log.Info("API server replica gone; ending its session", "replica", l.addr)
		l.cancel()
		<-l.done
		_ = l.conn.Close()
	}
	a.linksMu.Lock()
	defer a.linksMu.Unlock()
	for addr := range want {
		if a.links[addr] != nil {
			continue
		}
		conn, err := a.cfg.Dial(addr)
		if err != nil {
			return fmt.Errorf("API server replica %s: %w", addr, err)
		}
		lctx, cancel := context.WithCancel(ctx)
		l := &link{addr: addr, conn: conn, cancel: cancel, done: make(chan struct{}),
			wake: make(chan struct{}, 1), beat: make(chan struct{}, 1), drained: make(chan *atev1.Drained, 1)}
		a.links[addr] = l
		go func() {
			defer close(l.done)
			a.keep(lctx, l, first)
		}()
	}
	return nil
}

// keep runs l's sessions one after another until ctx ends.
func (a *Agent) keep(ctx context.Context, l *link, first func(error)) {
	backoff := minBackoff
	// Until when a refusal that names a wait (the name still held by a
	// predecessor whose registration has not lapsed) is waited out
	// rather than reported: set by the first such refusal, and moved
	// once by a later one that names a longer wait.
	var waitUntil time.Time
	extended := false
	for ctx.Err() == nil {
		welcomed, err := a.session(ctx, l, func() {
			first(nil)
			backoff = minBackoff
		})
		l.mu.Lock()
		l.live = false
		l.mu.Unlock()
		if ctx.Err() != nil {
			break
		}
		if !welcomed && status.Code(err) != codes.Unavailable {
			d, ok := retryDelay(err)
			d = min(d, maxPredecessorWait)
			switch until := time.Now().Add(2*d + time.Second); {
			case !ok:
			case waitUntil.IsZero():
				// A dead predecessor falls silent within d; twice that
				// (and a second for scheduling) before concluding it is
				// alive.
				waitUntil = until
			case until.After(waitUntil) && !extended:
				// A replica whose loss check ran late (it stood still)
				// counts the silence anew, so a dead predecessor's wait
				// can start over once. Not more: a live one, heartbeating,
				// names a full wait every time, and must be reported.
				waitUntil, extended = until, true
			}
			if ok && time.Now().Before(waitUntil) {
				a.log.Warn("this node's name is still registered by another incarnation; waiting for it to fall silent",
					"replica", l.addr, "err", err, "until", waitUntil)
			} else {
				first(err)
			}
		}
		a.log.Warn("node registration interrupted; retrying", "replica", l.addr, "err", err, "backoff", backoff)
		// The replica may be gone for good (a rolling update): look for
		// the current ones now rather than at the next ResolveEvery.
		a.resolveSoon()
		a.fenceIfLost()
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// fenceIfLost fences the node when no replica has heard from it for ¾
// of its loss deadline (replicas that never welcomed us count as out of
// touch since forever, but at least one must have welcomed us: before
// that the node is fenced anyway).
func (a *Agent) fenceIfLost() {
	lost, known := true, false
	for _, l := range a.current() {
		l.mu.Lock()
		if l.leaseTTL > 0 {
			// The node's lease decides (the tunnel checks it).
			l.mu.Unlock()
			return
		}
		if l.lostAfter > 0 {
			known = true
			if l.live || time.Since(l.lastTouch) <= l.lostAfter*3/4 {
				lost = false
			}
		}
		l.mu.Unlock()
	}
	if known && lost {
		a.cfg.Node.Fence(true)
	}
}

// session runs one Register stream with l's replica: hello, welcome
// (welcomed is called), then heartbeats and events until it breaks.
func (a *Agent) session(ctx context.Context, l *link, welcomed func()) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := atev1.NewNodeRegistryClient(l.conn).Register(ctx)
	if err != nil {
		return false, err
	}
	helloSent := time.Now()
	if err := stream.Send(&atev1.NodeMessage{Msg: &atev1.NodeMessage_Hello{Hello: a.hello()}}); err != nil {
		if errors.Is(err, io.EOF) {
			// The server ended the stream first (say, PermissionDenied);
			// grpc-go gives its status only to Recv.
			_, err = stream.Recv()
		}
		return false, err
	}
	var heartbeat, lostAfter, leaseTTL time.Duration
	var leaseToken int64
	for heartbeat == 0 {
		in, err := stream.Recv()
		if err != nil {
			return false, err
		}
		switch m := in.GetMsg().(type) {
		case *atev1.RegistryMessage_Stop:
			a.stop(ctx, m.Stop)
		case *atev1.RegistryMessage_Welcome:
			heartbeat = time.Duration(m.Welcome.GetHeartbeatMs()) * time.Millisecond
			lostAfter = time.Duration(m.Welcome.GetLostAfterMs()) * time.Millisecond
			leaseTTL = time.Duration(m.Welcome.GetLeaseMs()) * time.Millisecond
			leaseToken = m.Welcome.GetLeaseToken()
		}
	}
	if heartbeat <= 0 {
		return false, errors.New("registry sent no heartbeat interval")
	}
	touch := func() {
		l.mu.Lock()
		l.lastTouch = time.Now()
		l.mu.Unlock()
	}
	l.mu.Lock()
	l.lastTouch, l.lostAfter, l.live = time.Now(), lostAfter, true
	l.leaseTTL, l.sent = leaseTTL, map[int64]time.Time{}
	l.mu.Unlock()
	if leaseTTL > 0 {
		a.leaseHeld(leaseToken, leaseTTL, helloSent)
	}
	a.cfg.Node.Fence(false)
	welcomed()
	if a.draining.Load() {
		l.report(&atev1.NodeEvent{Kind: atev1.NodeEvent_DRAIN})
	}
	a.log.Info("node registered", "node", a.cfg.Node.Name(), "replica", l.addr, "epoch", a.epoch, "heartbeat", heartbeat, "lostAfter", lostAfter)

	recvErr := make(chan error, 1)
	go func() {
		for {
			in, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			switch m := in.GetMsg().(type) {
			case *atev1.RegistryMessage_Stop:
				a.stop(ctx, m.Stop)
			case *atev1.RegistryMessage_Drained:
				select {
				case l.drained <- m.Drained:
				default:
				}
			case *atev1.RegistryMessage_LeaseRenewed:
				a.renewed(l, m.LeaseRenewed.GetSeq())
			case *atev1.RegistryMessage_Drain:
				a.drainOrdered(m.Drain.GetReason())
			}
		}
	}()
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		if err := l.flush(stream, func() error { return a.sendHeartbeat(l, stream, a.heartbeat()) }); err != nil {
			return true, err
		}
		touch()
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case err := <-recvErr:
			return true, err
		case <-l.wake:
		case <-l.beat:
			if err := a.sendHeartbeat(l, stream, a.heartbeat()); err != nil {
				return true, err
			}
		case <-tick.C:
			if err := a.sendHeartbeat(l, stream, a.heartbeat()); err != nil {
				return true, err
			}
		}
	}
}

// flush sends the queued events; an event that fails to go is kept for
// the next session.
func (l *link) flush(stream atev1.NodeRegistry_RegisterClient, beat func() error) error {
	l.mu.Lock()
	evs := l.events
	l.events = nil
	l.mu.Unlock()
	for i, ev := range evs {
		if ev.GetKind() == atev1.NodeEvent_IDLE {
			// The idle worker's activity goes first, so the API server
			// orders victims by it at once.
			if err := beat(); err != nil {
				l.requeue(evs[i:])
				return err
			}
		}
		if err := stream.Send(&atev1.NodeMessage{Msg: &atev1.NodeMessage_Event{Event: ev}}); err != nil {
			l.requeue(evs[i:])
			return err
		}
	}
	return nil
}

func (l *link) requeue(evs []*atev1.NodeEvent) {
	l.mu.Lock()
	l.events = append(evs, l.events...)
	l.mu.Unlock()
}

func (a *Agent) stop(ctx context.Context, o *atev1.StopOrder) {
	a.log.Info("stopping a sandbox the API server does not give this node", "worker", o.GetWorker(), "actorUid", o.GetActorUid())
	if err := a.cfg.Node.Stop(ctx, o.GetWorker(), o.GetActorUid()); err != nil && !errors.Is(err, nodeapi.ErrStale) {
		a.log.Warn("stop order", "worker", o.GetWorker(), "err", err)
	}
}

func (a *Agent) hello() *atev1.NodeHello {
	h := &atev1.NodeHello{Node: a.cfg.Node.Name(), Epoch: a.epoch, Address: a.cfg.Address,
		TunnelAddress: a.cfg.TunnelAddr, SandboxClass: a.cfg.SandboxClass, Snapshots: a.cfg.Snapshots, LeaseToken: a.token()}
	hosted := a.cfg.Node.Hosted()
	for _, w := range a.cfg.Node.Workers() {
		h.Workers = append(h.Workers, &atev1.NodeWorker{Name: w.Name, Labels: maps.Clone(w.Labels), HostedActorUid: hosted[w.Name]})
	}
	return h
}

func (a *Agent) heartbeat() *atev1.NodeHeartbeat {
	hb := &atev1.NodeHeartbeat{Sent: timestamppb.New(clock.Now())}
	for _, w := range a.cfg.Node.Workers() {
		act, ok := a.cfg.Node.WorkerActivity(w.Name)
		if !ok {
			continue
		}
		hb.Activity = append(hb.Activity, &atev1.WorkerActivity{Worker: w.Name, ActorUid: act.ActorUID,
			InFlight: int32(act.InFlight), Streams: int32(act.Streams), Listeners: int32(act.Listeners), Served: act.Served,
			Started: timestamppb.New(clock.Wall(act.Started)), Last: timestamppb.New(clock.Wall(act.Last))})
	}
	for key, workers := range a.cfg.Node.Standbys() {
		hb.Standbys = append(hb.Standbys, &atev1.Standby{Key: key, Workers: workers})
	}
	return hb
}

// drainOrdered handles a replica's drain order (DrainNode): every
// replica hears DRAIN from now on, once per session, so that none
// places actors here; the node keeps running (its own Drain, on
// shutdown, waits for the answers and leaves).
func (a *Agent) drainOrdered(reason string) {
	if a.draining.Swap(true) {
		return
	}
	a.log.Info("node drained by the API server: telling every replica", "reason", reason)
	a.Report(&atev1.NodeEvent{Kind: atev1.NodeEvent_DRAIN})
}

// Drain asks the API server replicas to put away every actor this node
// has — suspend those it runs, upload its paused checkpoints — and to
// place nothing new here, waits (until ctx ends) for the answer of every
// replica it is in touch with (at least one), then tells them the node
// leaves. Call it on shutdown while Run still runs. An error means actors
// were left here: their memory since their last durable snapshot (and
// paused checkpoints not uploaded) goes with the node.
func (a *Agent) Drain(ctx context.Context) error {
	a.draining.Store(true)
	a.Report(&atev1.NodeEvent{Kind: atev1.NodeEvent_DRAIN})
	answered := map[*link]bool{}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		done, waiting := 0, 0
		for _, l := range a.current() {
			if !answered[l] {
				select {
				case d := <-l.drained:
					if d.GetError() != "" {
						return fmt.Errorf("drain: the API server could not put every actor away: %s", d.GetError())
					}
					answered[l] = true
				default:
				}
			}
			l.mu.Lock()
			live := l.live
			l.mu.Unlock()
			switch {
			case answered[l]:
				done++
			case live:
				waiting++
			}
		}
		if done > 0 && waiting == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain: no answer from the API server (%w); %d actors still running here lose their memory since their last snapshot", ctx.Err(), len(a.cfg.Node.Hosted()))
		case <-tick.C:
		}
	}
	a.Report(&atev1.NodeEvent{Kind: atev1.NodeEvent_LEAVE})
	// The leave must go out while the streams are still open.
	return waitTick(ctx, tick, func() bool {
		for _, l := range a.current() {
			l.mu.Lock()
			pending := len(l.events) > 0 && l.live
			l.mu.Unlock()
			if pending {
				return false
			}
		}
		return true
	})
}

// waitTick checks cond at every tick until it holds or ctx ends.
func waitTick(ctx context.Context, tick *time.Ticker, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// maxPredecessorWait bounds the wait a refusal may name: a loss
// deadline is seconds, and a replica's answer should not park a node's
// start for longer.
const maxPredecessorWait = 5 * time.Minute

// retryDelay is the wait a refusal names (errdetails.RetryInfo), if any.
func retryDelay(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
