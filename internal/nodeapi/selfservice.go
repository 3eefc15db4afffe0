package nodeapi

import "errors"

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

// ErrNotHosted: the record store does not assign the worker a
// self-service call came through to the actor incarnation that made it,
// not now (the actor moved, was put away, deleted or re-created), so the
// API server did nothing. It is the control plane's verdict on an
// actor's call; ErrStale is a node's on a call of the control plane.
var ErrNotHosted = errors.New("the worker does not host this actor now")
