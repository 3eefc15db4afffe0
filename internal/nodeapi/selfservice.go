package nodeapi

import (
	"context"
	"errors"
)

// The self-service calls: what an actor asks, from inside its sandbox, of
// its worker's self-service endpoint (POST /v1/<call>), which the node
// forwards to the API server with the worker's name and the actor
// incarnation (uid) its gate admits. Besides these, a checkpoint
// action's name (checkpoint.Action: suspend, pause) is a call.
const (
	// SelfCallAlarms sets an alarm for the actor (docs/alarms.md).
	SelfCallAlarms = "alarms"
	// SelfCallToken mints an identity token for the actor
	// (docs/security.md, Actor identity).
	SelfCallToken = "token"
)

// SelfCallFunc answers a self-service call for the actor incarnation
// actorUID hosted by worker: call is SelfCallAlarms, SelfCallToken or a
// checkpoint action's name, body what the actor sent. It returns the
// HTTP status and body the node answers the actor with, after the API
// server checked the worker's assignment in the record store (409,
// ErrNotHosted, when it no longer holds). It may block on the record
// store, never on the actor's checkpoint. It is the one shape of the
// self-service call on both sides of the node protocol: the node's
// Uplink.SelfCall forwards it, the API server's answer
// (apiserver.SelfService.Answer) is what the node registry calls.
type SelfCallFunc func(ctx context.Context, worker, actorUID, call string, body []byte) (status int, answer []byte)

// Uplink is everything a node tells its control plane on its own
// initiative, in one interface: the node's half of the node protocol
// (nodeagent.Agent) implements it by forwarding each call to an API
// server replica, where it becomes an Events call or a self-service
// answer. A node without one answers self-service calls 501 and tells
// nobody of exits and idle workers (tests).
type Uplink interface {
	// WorkerExited: the sandbox of actorUID on worker exited on its own
	// (not by checkpoint or stop); the worker is already empty.
	WorkerExited(worker, actorUID string)
	// WorkerIdle: the actor worker hosts has no request in flight left
	// but streams, the moment it may become an eviction victim. Called
	// on the request's goroutine: it must not block.
	WorkerIdle(worker string)
	// SelfCall is a SelfCallFunc: an actor's self-service call.
	SelfCall(ctx context.Context, worker, actorUID, call string, body []byte) (status int, answer []byte)
}

// ErrNotHosted: the record store does not assign the worker a
// self-service call came through to the actor incarnation that made it,
// not now (the actor moved, was put away, deleted or re-created), so the
// API server did nothing. It is the control plane's verdict on an
// actor's call; ErrStale is a node's on a call of the control plane.
var ErrNotHosted = errors.New("the worker does not host this actor now")
