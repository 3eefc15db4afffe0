package router

import (
	"context"

	"substrate.dev/ate/internal/names"
)

// Target is where an actor's traffic goes right now: the worker tunnel that
// fronts the worker the actor is assigned to.
type Target struct {
	Actor names.ActorKey
	// UID identifies this incarnation of the actor; the tunnel rejects a
	// request whose UID is not the one assigned to the worker (421).
	UID string
	// Worker is the worker's name; TunnelAddr the tunnel's host:port.
	Worker     string
	TunnelAddr string
}

// Resolver finds and wakes actors. Implementations are safe for concurrent
// use. Errors are gRPC status errors (codes.NotFound for an unknown actor,
// codes.ResourceExhausted or codes.DeadlineExceeded when no worker freed in
// time, codes.InvalidArgument, codes.FailedPrecondition, codes.Unavailable
// when the resume itself failed).
type Resolver interface {
	// Lookup returns the actor's target when it is RUNNING; ok is false when
	// it exists but is not running.
	Lookup(ctx context.Context, key names.ActorKey) (t Target, ok bool, err error)
	// Resume wakes the actor (waiting for a free worker until ctx ends) and
	// returns its target once it is RUNNING and ready.
	Resume(ctx context.Context, key names.ActorKey) (Target, error)
}

// Tunnel protocol headers: the router names the worker and the actor
// incarnation it expects; the tunnel answers 421 Misdirected Request when
// the worker no longer hosts that actor.
const (
	HeaderWorker   = "Ate-Worker"
	HeaderActorUID = "Ate-Actor-Uid"
	// HeaderTargetActor selects the actor as "<atespace>/<name>" when the
	// Host header does not.
	HeaderTargetActor = "Ate-Target-Actor"
)
