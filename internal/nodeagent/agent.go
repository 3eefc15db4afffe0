package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/node"
)

// AgentConfig configures an Agent.
type AgentConfig struct {
	// Node is the node agent announced; its workers are registered.
	Node *node.Node
	// Conn reaches the API server's NodeRegistry.
	Conn grpc.ClientConnInterface
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

// Agent keeps the node registered with the API server: it holds one
// Register stream open (reconnecting with backoff when it breaks), sends
// the hello, a heartbeat every interval the API server asks for, and the
// node's events, and obeys stop orders. While it has been out of touch
// longer than the API server's loss deadline, it fences the node (the
// tunnel refuses all traffic as stale): the API server may have declared
// it lost and resumed its actors elsewhere.
type Agent struct {
	cfg   AgentConfig
	log   *slog.Logger
	epoch int64

	mu     sync.Mutex
	events []*atev1.NodeEvent
	wake   chan struct{}

	// draining is set by Drain; every session then asks for the drain
	// again, and drained hears the API server's answer.
	draining atomic.Bool
	drained  chan *atev1.Drained
}

// NewAgent returns an agent for cfg.Node; call Run.
func NewAgent(cfg AgentConfig) *Agent {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Agent{cfg: cfg, log: log, epoch: time.Now().UnixNano(), wake: make(chan struct{}, 1), drained: make(chan *atev1.Drained, 1)}
}

// Epoch is this process's registration epoch.
func (a *Agent) Epoch() int64 { return a.epoch }

// Report queues an event for the API server (exits, idle workers,
// self-service requests, the drain); it never blocks.
func (a *Agent) Report(ev *atev1.NodeEvent) {
	a.mu.Lock()
	a.events = append(a.events, ev)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Exited, Idle and SelfRequest are the node's handlers
// (node.SetExitHandler, SetIdleHandler, ServeSelfService) forwarding to
// the API server.
func (a *Agent) Exited(worker, actorUID string) {
	a.Report(&atev1.NodeEvent{Kind: atev1.NodeEvent_EXITED, Worker: worker, ActorUid: actorUID})
}

// Idle implements the node's idle handler.
func (a *Agent) Idle(worker string) {
	a.Report(&atev1.NodeEvent{Kind: atev1.NodeEvent_IDLE, Worker: worker})
}

// SelfRequest implements node.SelfFunc.
func (a *Agent) SelfRequest(worker, actorUID string, action checkpoint.Action) {
	a.Report(&atev1.NodeEvent{Kind: atev1.NodeEvent_SELF_REQUEST, Worker: worker, ActorUid: actorUID, Action: action.String()})
}

// Backoff bounds between registration attempts.
const (
	minBackoff = 200 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// Run keeps the node registered until ctx ends. The first registration's
// outcome is sent on first (nil once welcomed, else the refusal), so a
// caller can fail start-up on a name already live elsewhere instead of
// retrying forever; later breaks are retried.
func (a *Agent) Run(ctx context.Context, first chan<- error) error {
	backoff := minBackoff
	var lastTouch time.Time // the last moment the API server heard us
	lostAfter := time.Duration(0)
	for ctx.Err() == nil {
		welcomed, err := a.session(ctx, func(la time.Duration) {
			lostAfter = la
			if first != nil {
				first <- nil
				first = nil
			}
			backoff = minBackoff
		}, &lastTouch)
		if ctx.Err() != nil {
			break
		}
		if first != nil && !welcomed && status.Code(err) != codes.Unavailable {
			first <- err
			first = nil
		}
		a.log.Warn("node registration interrupted; retrying", "err", err, "backoff", backoff)
		if lostAfter > 0 && !lastTouch.IsZero() && time.Since(lastTouch) > lostAfter*3/4 {
			a.cfg.Node.Fence(true)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
	return nil
}

// session runs one Register stream: hello, welcome (welcomed is called
// with the loss deadline), then heartbeats and events until it breaks.
func (a *Agent) session(ctx context.Context, welcomed func(lostAfter time.Duration), lastTouch *time.Time) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := atev1.NewNodeRegistryClient(a.cfg.Conn).Register(ctx)
	if err != nil {
		return false, err
	}
	if err := stream.Send(&atev1.NodeMessage{Msg: &atev1.NodeMessage_Hello{Hello: a.hello()}}); err != nil {
		return false, err
	}
	var heartbeat, lostAfter time.Duration
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
		}
	}
	if heartbeat <= 0 {
		return false, errors.New("registry sent no heartbeat interval")
	}
	*lastTouch = time.Now()
	a.cfg.Node.Fence(false)
	welcomed(lostAfter)
	if a.draining.Load() {
		a.Report(&atev1.NodeEvent{Kind: atev1.NodeEvent_DRAIN})
	}
	a.log.Info("node registered", "node", a.cfg.Node.Name(), "epoch", a.epoch, "heartbeat", heartbeat, "lostAfter", lostAfter)

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
				case a.drained <- m.Drained:
				default:
				}
			}
		}
	}()
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		if err := a.flush(stream); err != nil {
			return true, err
		}
		*lastTouch = time.Now()
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case err := <-recvErr:
			return true, err
		case <-a.wake:
		case <-tick.C:
			if err := stream.Send(&atev1.NodeMessage{Msg: &atev1.NodeMessage_Heartbeat{Heartbeat: a.heartbeat()}}); err != nil {
				return true, err
			}
		}
	}
}

// flush sends the queued events; an event that fails to go is kept for
// the next session.
func (a *Agent) flush(stream atev1.NodeRegistry_RegisterClient) error {
	a.mu.Lock()
	evs := a.events
	a.events = nil
	a.mu.Unlock()
	for i, ev := range evs {
		if ev.GetKind() == atev1.NodeEvent_IDLE {
			// The idle worker's activity goes first, so the API server
			// orders victims by it at once.
			if err := stream.Send(&atev1.NodeMessage{Msg: &atev1.NodeMessage_Heartbeat{Heartbeat: a.heartbeat()}}); err != nil {
				a.requeue(evs[i:])
				return err
			}
		}
		if err := stream.Send(&atev1.NodeMessage{Msg: &atev1.NodeMessage_Event{Event: ev}}); err != nil {
			a.requeue(evs[i:])
			return err
		}
	}
	return nil
}

func (a *Agent) requeue(evs []*atev1.NodeEvent) {
	a.mu.Lock()
	a.events = append(evs, a.events...)
	a.mu.Unlock()
}

func (a *Agent) stop(ctx context.Context, o *atev1.StopOrder) {
	a.log.Info("stopping a sandbox the API server does not give this node", "worker", o.GetWorker(), "actorUid", o.GetActorUid())
	if err := a.cfg.Node.Stop(ctx, o.GetWorker(), o.GetActorUid()); err != nil && !errors.Is(err, node.ErrStale) {
		a.log.Warn("stop order", "worker", o.GetWorker(), "err", err)
	}
}

func (a *Agent) hello() *atev1.NodeHello {
	h := &atev1.NodeHello{Node: a.cfg.Node.Name(), Epoch: a.epoch, Address: a.cfg.Address,
		TunnelAddress: a.cfg.TunnelAddr, SandboxClass: a.cfg.SandboxClass, Snapshots: a.cfg.Snapshots}
	hosted := a.cfg.Node.Hosted()
	for _, w := range a.cfg.Node.Workers() {
		h.Workers = append(h.Workers, &atev1.NodeWorker{Name: w.Name, Labels: maps.Clone(w.Labels), HostedActorUid: hosted[w.Name]})
	}
	return h
}

func (a *Agent) heartbeat() *atev1.NodeHeartbeat {
	hb := &atev1.NodeHeartbeat{}
	for _, w := range a.cfg.Node.Workers() {
		act, ok := a.cfg.Node.WorkerActivity(w.Name)
		if !ok {
			continue
		}
		hb.Activity = append(hb.Activity, &atev1.WorkerActivity{Worker: w.Name, ActorUid: act.ActorUID,
			InFlight: int32(act.InFlight), Streams: int32(act.Streams), Served: act.Served,
			Started: timestamppb.New(act.Started), Last: timestamppb.New(act.Last)})
	}
	for key, workers := range a.cfg.Node.Standbys() {
		hb.Standbys = append(hb.Standbys, &atev1.Standby{Key: key, Workers: workers})
	}
	return hb
}

// Drain asks the API server to put away every actor this node has —
// suspend those it runs, upload its paused checkpoints — and to place
// nothing new here, waits (until ctx ends) for its answer, then tells it
// the node leaves. Call it on shutdown while Run still runs. An error
// means actors were left here: their memory since their last durable
// snapshot (and paused checkpoints not uploaded) goes with the node.
func (a *Agent) Drain(ctx context.Context) error {
	a.draining.Store(true)
	a.Report(&atev1.NodeEvent{Kind: atev1.NodeEvent_DRAIN})
	select {
	case <-ctx.Done():
		return fmt.Errorf("drain: no answer from the API server (%w); %d actors still running here lose their memory since their last snapshot", ctx.Err(), len(a.cfg.Node.Hosted()))
	case d := <-a.drained:
		if d.GetError() != "" {
			return fmt.Errorf("drain: the API server could not put every actor away: %s", d.GetError())
		}
	}
	a.Report(&atev1.NodeEvent{Kind: atev1.NodeEvent_LEAVE})
	// The leave must go out while the stream is still open.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	return waitTick(ctx, tick, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.events) == 0
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
