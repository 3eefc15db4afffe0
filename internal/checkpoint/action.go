// Package checkpoint names what can be done to a running actor to free its
// worker: suspend it (checkpoint to the snapshot store) or pause it
// (checkpoint to its node's disk). Templates choose one for idle actors and
// evictions (idle.action), and actors ask for one from inside their sandbox
// (node self-service); the router, the lifecycle workflows, the API server
// and the node all speak this one type.
//
// It also names the other way back (Source): what a resume restores, a
// checkpoint one of the actions left or none. The lifecycle workflows
// decide it and metrics counts by it; metrics cannot import lifecycle,
// which imports metrics, and both already import this package.
//
// It is a package of its own, importing nothing of Substrate's, so that
// the router (which must not import lifecycle or store) and the lifecycle
// workflows share it without a new dependency between them. internal/names
// would do as a home too, but it holds identifiers and their validation,
// and an action is neither.
package checkpoint

import (
	"fmt"
	"strconv"
)

// Action is a way to put a running actor away. The zero value is Suspend,
// the default wherever an action is optional.
type Action uint8

const (
	// Suspend checkpoints the actor to the snapshot store (durable, any
	// node can resume it) and frees its worker: Control.SuspendActor.
	Suspend Action = iota
	// Pause checkpoints the actor to its node's disk and frees its
	// worker; the next resume prefers that node: Control.PauseActor.
	Pause
)

// String returns the action's name on the wire: "suspend" or "pause".
func (a Action) String() string {
	switch a {
	case Suspend:
		return "suspend"
	case Pause:
		return "pause"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// ParseAction parses an action's wire name. The empty string is Suspend:
// a template's idle.action, when left out, keeps the checkpoint durable.
// Anything else is an error naming the accepted values.
func ParseAction(s string) (Action, error) {
	switch s {
	case "", "suspend":
		return Suspend, nil
	case "pause":
		return Pause, nil
	}
	return Suspend, fmt.Errorf("unknown checkpoint action %q: want %s or %s", s, Pause, Suspend)
}

// MarshalText implements encoding.TextMarshaler.
func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// Done is the action's past participle, for messages: "suspended" or
// "paused".
func (a Action) Done() string {
	if a == Pause {
		return "paused"
	}
	return "suspended"
}
