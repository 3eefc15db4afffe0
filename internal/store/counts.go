package store

import "context"

// ActorCounter counts actors by state. Both backends implement it
// (bolt: a read of every record; postgres: a GROUP BY), so callers bound
// how often they ask; it is not part of Store, which stays the
// workflows' interface.
type ActorCounter interface {
	// CountActors returns the number of actors in each state; states
	// without actors are absent.
	CountActors(ctx context.Context) (map[ActorState]int, error)
}
