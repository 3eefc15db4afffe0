package store

import (
	"context"
	"time"

	"substrate.dev/ate/internal/names"
)

// ActorCounter counts actors by state. Both backends implement it
// (bolt: a read of every record; postgres: a GROUP BY), so callers bound
// how often they ask; it is not part of Store, which stays the
// workflows' interface.
type ActorCounter interface {
	// CountActors returns the number of actors in each state; states
	// without actors are absent.
	CountActors(ctx context.Context) (map[ActorState]int, error)
}

// CommitObserver is told about every write transaction a backend commits:
// how long it took (begin to commit, the disk's syncs included) and how
// many writes it carried (bbolt's group commit puts concurrent writes in
// one transaction; PostgreSQL's are one each). Must be safe for
// concurrent use and quick.
type CommitObserver interface {
	Commit(d time.Duration, writes int)
}

// CommitObserved is a backend that reports its commits to an observer
// set after opening (nil: none).
type CommitObserved interface {
	SetCommitObserver(o CommitObserver)
}

// Pinger is a backend that can say whether it reaches its database now
// (PostgreSQL). One in this process (bbolt) always does.
type Pinger interface {
	Ping(ctx context.Context) error
}

// ActorLeaser is a backend that takes an actor's lease and reads the
// actor and its template in one round trip (PostgreSQL): the first three
// things every workflow over a shared store does, each a round trip
// otherwise. Not part of Store: over bbolt a read is a memory access and
// one process needs no leases.
type ActorLeaser interface {
	// LeaseActor is AcquireLease of lease for holder (TakeOverLease
	// with takeOver), with the same errors, that also returns key's
	// actor and that actor's template as they stood once the lease was
	// held: a write the acquisition waited for is seen. The actor is
	// nil when there is none or its record does not decode, the
	// template when the actor or it is missing or does not decode; the
	// caller then reads it itself, for the error. A read that fails
	// otherwise fails the call, and the lease is not taken.
	LeaseActor(ctx context.Context, lease string, key names.ActorKey, holder string, ttl time.Duration, takeOver bool) (*Lease, *Actor, *Template, error)
}
