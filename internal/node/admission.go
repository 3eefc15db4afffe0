package node

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"substrate.dev/ate/internal/streams"
	"substrate.dev/ate/internal/tunnelproto"
)

// gate is one worker's tunnel admission and activity bookkeeping: which
// actor incarnation (and container, port) the tunnel may send requests
// to, how many requests are in flight, whether a checkpoint drains them,
// and what the actor's traffic was (activity.go). It is all the tunnel
// reads of a worker (through Node.enter, Node.admitting, Node.cutState), and
// its own mutex keeps the tunnel from ever waiting behind a sandbox
// operation. Sandbox operations, under the slot's opMu, open it once a
// start is ready and close it when the container goes. Safe for
// concurrent use.
type gate struct {
	mu sync.Mutex
	// actorUID, container and port are the admitted incarnation, set by
	// open; actorUID is empty while the gate is closed.
	actorUID  string
	container string
	port      int
	// assignment is the lease token the start ran under (0: none), which
	// requests must name if they name one (tunnelproto.HeaderAssignment).
	assignment int64
	// draining refuses new requests; inflight counts admitted ones, old
	// containers' included; drained is closed when inflight reaches zero
	// while draining.
	draining bool
	inflight int
	drained  chan struct{}
	// act is the admitted actor's traffic; nil when none.
	act *actorActivity
	// cut is set when a checkpoint's drain grace ran out with requests
	// still in flight; cleared by the next start (uncut).
	cut bool
	// ending is closed when a drain starts: the admitted incarnation's
	// listening streams end then (cleanly, see NewTunnel) instead of
	// holding the checkpoint for its grace. open makes a new one.
	ending chan struct{}
}

// open admits requests for actorUID to container's port from now on,
// started under lease token assignment.
func (g *gate) open(actorUID, container string, port int, assignment int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	g.actorUID, g.container, g.port, g.assignment = actorUID, container, port, assignment
	g.act = &actorActivity{started: now, last: now}
	g.ending = make(chan struct{})
}

// close stops admitting: the worker hosts nothing. inflight stays:
// requests still running on the old container (the cutter ends them)
// release their count later, and a reset would drive it negative and let
// the next drain skip its wait.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.actorUID, g.container, g.port, g.act = "", "", 0, nil
	g.draining, g.drained = false, nil
}

// containerGone records that the admitted container no longer exists (a
// checkpoint deleted it), so the requests it admitted are cut.
func (g *gate) containerGone() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.container = ""
}

// stopped marks requests still running as cut: the container is being
// stopped on purpose (revert, forced delete), so they are answered 503 +
// Retry-After like a checkpoint's (the actor will be back), not 502 as if
// the app had failed.
func (g *gate) stopped() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cut = true
}

// uncut clears cut for a new start.
func (g *gate) uncut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cut = false
}

// hosts reports whether the gate admits actorUID.
func (g *gate) hosts(actorUID string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.actorUID == actorUID
}

// hosted returns the admitted actor's uid, empty when none.
func (g *gate) hosted() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.actorUID
}

// admission is what gate.enter hands an admitted request.
type admission struct {
	container string
	port      int
	// ending is closed when a drain starts; nil (never closed) unless
	// the request is a listening stream.
	ending <-chan struct{}
	// release must be called when the request ends; it reports whether
	// the actor then has no request in flight but streams.
	release func() (idle bool)
	// busied: the actor had no request in flight before this one.
	busied bool
}

// enter admits one request for actorUID as assigned by lease token
// assignment (0: unchecked): a stream if stream, a listening stream
// (streams.IsListen, a stream too) if listen. ok is false when the gate
// does not admit that actor, admits it under another assignment (the
// router's view and the sandbox are of different placements), or is
// draining.
func (g *gate) enter(actorUID string, assignment int64, stream, listen bool) (adm admission, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if actorUID == "" || g.actorUID != actorUID || g.draining ||
		assignment != 0 && g.assignment != 0 && assignment != g.assignment {
		return admission{}, false
	}
	g.inflight++
	// open set act with actorUID; the request keeps its incarnation's
	// counter even after the gate moves on to another actor.
	act := g.act
	act.inflight++
	adm.busied = act.inflight == 1
	act.last = time.Now()
	if stream {
		act.streams++
	}
	if listen {
		act.listeners++
		adm.ending = g.ending
	}
	adm.container, adm.port = g.container, g.port
	adm.release = func() (idle bool) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.inflight--
		act.inflight--
		act.served++
		act.last = time.Now()
		if stream {
			act.streams--
		}
		if listen {
			act.listeners--
		}
		idle = act.inflight == act.streams && g.act == act
		if g.inflight == 0 && g.drained != nil {
			close(g.drained)
			g.drained = nil
		}
		return idle
	}
	return adm, true
}

// drain stops admitting, ends listening streams (closes ending) and
// waits until in-flight requests end, grace passes or ctx ends. cutOff
// reports that grace ran out with requests still in flight: the
// checkpoint that follows cuts them off.
func (g *gate) drain(ctx context.Context, grace time.Duration) (cutOff bool) {
	g.mu.Lock()
	g.draining = true
	if g.ending != nil {
		close(g.ending)
		g.ending = nil
	}
	if g.inflight == 0 {
		g.mu.Unlock()
		return false
	}
	done := make(chan struct{})
	g.drained = done
	g.mu.Unlock()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		g.mu.Lock()
		defer g.mu.Unlock()
		g.cut = g.inflight > 0
		return true
	case <-ctx.Done():
	}
	return false
}

// admitting returns the admitted container and whether a checkpoint's
// drain cut its requests off.
func (g *gate) admitting() (container string, cut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.container, g.cut
}

// cutState returns the admitted container and whether its requests are
// cut off: the last checkpoint's drain grace ran out, one drains now, or
// the container is being stopped.
func (g *gate) cutState() (container string, cut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.container, g.cut || g.draining
}

// activity returns the admitted actor's activity, ok false when none.
func (g *gate) activity() (Activity, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.actorUID == "" {
		return Activity{}, false
	}
	a := g.act
	return Activity{ActorUID: g.actorUID, InFlight: a.inflight, Streams: a.streams, Listeners: a.listeners,
		Served: a.served, Started: a.started, Last: a.last}, true
}

// The tunnel's view of the node (tunnel.go, cut.go): these three are all
// it asks of the workers.

// enter admits one tunnel request r for actorUID on worker. ok is false
// when the worker does not host that actor or is draining it for a
// checkpoint; otherwise release must be called when the request ends,
// and ending (nil unless r is a listening stream) is closed when a
// checkpoint starts draining the worker.
func (n *Node) enter(worker, actorUID string, r *http.Request) (t tunnelTarget, ending <-chan struct{}, release func(), ok bool) {
	s, err := n.slot(worker)
	if err != nil || !n.Serving() {
		return tunnelTarget{}, nil, nil, false
	}
	assignment, err := assignmentOf(r)
	if err != nil {
		return tunnelTarget{}, nil, nil, false
	}
	adm, ok := s.gate.enter(actorUID, assignment, isStream(r), streams.IsListen(r))
	if !ok {
		return tunnelTarget{}, nil, nil, false
	}
	if adm.busied {
		signal(n.viewChanged)
	}
	return tunnelTarget{worker: worker, container: adm.container, port: adm.port, sb: s.sb}, adm.ending, func() {
		if idle := adm.release(); idle {
			if u := n.up(); u != nil {
				u.WorkerIdle(worker)
			}
		}
	}, true
}

// admitting returns the container worker runs now and whether a
// checkpoint's drain cut its requests off.
func (n *Node) admitting(worker string) (container string, cut bool) {
	s, err := n.slot(worker)
	if err != nil {
		return "", true
	}
	return s.gate.admitting()
}

// cutState is the gate's cutState for worker, in one read, so the tunnel
// can answer a cut request 503 + Retry-After instead of a bare 502; an
// unknown worker counts as cut.
func (n *Node) cutState(worker string) (container string, cut bool) {
	s, err := n.slot(worker)
	if err != nil {
		return "", true
	}
	return s.gate.cutState()
}

// Fence makes the tunnel refuse every request as stale (421, so routers
// re-resolve) while on: a node out of touch with the API server longer
// than its loss deadline may have been declared lost, its actors resumed
// elsewhere, and must not serve them from here (docs/nodes.md).
func (n *Node) Fence(on bool) { n.fenced.Store(on) }

// ExtendLease makes the tunnel refuse every request as stale (421)
// from until on, unless the lease already runs later: the moment, by this process's monotonic clock, before which
// the node's lease in the record store cannot have run out, so that no
// API server replica can have declared the node lost and placed its
// actors elsewhere while it still serves them. It is checked on every
// request, not by a timer, so a node that stood still (SIGSTOP, a long
// pause) refuses at once when it wakes past its lease. A node never given
// a lease does not check one (an API server without node leases).
func (n *Node) ExtendLease(until time.Time) {
	for {
		cur := n.lease.Load()
		if cur != nil && !until.After(*cur) {
			return
		}
		if n.lease.CompareAndSwap(cur, &until) {
			return
		}
	}
}

// Serving reports whether the tunnel admits requests now: not fenced,
// and within the lease, if one is kept.
func (n *Node) Serving() bool {
	if n.fenced.Load() {
		return false
	}
	until := n.lease.Load()
	return until == nil || time.Now().Before(*until)
}

// LeaseLapsedFor is how long ago the lease ExtendLease keeps ran out: 0
// while it holds, or when none is kept.
func (n *Node) LeaseLapsedFor() time.Duration {
	until := n.lease.Load()
	if until == nil {
		return 0
	}
	return max(0, time.Since(*until))
}

// enterExec counts an `ate exec` process of actorUID as a request in
// flight for the actor's activity (so idle timeouts and eviction leave the
// actor alone while someone debugs it) but not for a checkpoint's drain,
// which ends execs at once instead of waiting for them (exec.go). ok is
// false when the gate does not admit actorUID or is draining; otherwise
// release must be called when the process ends.
func (g *gate) enterExec(actorUID string) (container string, release func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if actorUID == "" || g.actorUID != actorUID || g.draining || g.container == "" {
		return "", nil, false
	}
	act := g.act
	act.inflight++
	act.last = time.Now()
	return g.container, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		act.inflight--
		act.last = time.Now()
	}, true
}

// assignmentOf is the assignment token r names (tunnelproto.HeaderAssignment),
// 0 when none.
func assignmentOf(r *http.Request) (int64, error) {
	v := r.Header.Get(tunnelproto.HeaderAssignment)
	if v == "" {
		return 0, nil
	}
	return strconv.ParseInt(v, 10, 64)
}
