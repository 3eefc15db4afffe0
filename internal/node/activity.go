package node

import (
	"context"
	"net/http"
	"strings"
	"time"
)

// actorActivity is the live counter behind Activity; guarded by its
// slot's gate. A request keeps the one it entered under, so one still
// running on a container that is gone never counts against the worker's
// next actor.
type actorActivity struct {
	inflight, streams, listeners int
	served                       uint64
	started, last                time.Time
}

// WorkerActivity returns the activity of the actor worker hosts, ok false
// when the worker is unknown or hosts none.
func (n *Node) WorkerActivity(worker string) (Activity, bool) {
	s, err := n.slot(worker)
	if err != nil {
		return Activity{}, false
	}
	return s.gate.activity()
}

// ViewChanged is signalled (one signal may stand for several) when
// something changed that an API server learning of this node from
// heartbeats (nodeagent) must hear of at once rather than at the next
// one: a standby became ready, so the resume right after a suspend
// prefers the worker it freed (BENCHMARKS.md, Activation latency); or an
// actor with no request in flight got one, so eviction does not pick it
// as idle. (The way back to idle is reported at once too: the idle
// handler.)
func (n *Node) ViewChanged() <-chan struct{} { return n.viewChanged }

// signal sends on c without blocking: c has room for one signal, and one
// pending is enough.
func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// isStream reports whether r opens a long-lived exchange: a protocol
// upgrade (WebSocket) or a request for Server-Sent Events.
func isStream(r *http.Request) bool {
	return r.Header.Get("Upgrade") != "" || strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// Hosted returns, by worker, the uid of the actor each worker hosts now
// (workers hosting none are left out): what a node reports at
// registration and on shutdown waits to see empty.
// HostedActors implements nodeapi.Node: Hosted, as of the call.
func (n *Node) HostedActors(context.Context) (map[string]string, error) { return n.Hosted(), nil }

func (n *Node) Hosted() map[string]string {
	out := map[string]string{}
	for _, name := range n.order {
		if act, ok := n.WorkerActivity(name); ok {
			out[name] = act.ActorUID
		}
	}
	return out
}
