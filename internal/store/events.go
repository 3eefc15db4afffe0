package store

import (
	"context"
	"time"
)

// EventType says whether an Event reports ordinary progress or a
// failure. The strings equal the atev1.Event type values.
type EventType string

// Event types.
const (
	// EventNormal: a state transition that went as asked.
	EventNormal EventType = "Normal"
	// EventWarning: a failure (a failed restore or checkpoint, a crashed
	// sandbox, a lost node); Message says what happened.
	EventWarning EventType = "Warning"
)

// Deleted is the To of the event of an actor's deletion; no stored actor
// is ever in it.
const Deleted ActorState = "DELETED"

// Event is one change of an actor's lifecycle state, written by the
// workflow that made it (internal/lifecycle) after its store write
// committed. Events are kept for a bounded time and count (PruneEvents).
type Event struct {
	// Seq is assigned by AppendEvent, unique and increasing in append
	// order across the whole store: a watcher's cursor.
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	Type EventType `json:"type"`
	// Atespace, Actor (name) and ActorUID identify the actor.
	Atespace string `json:"atespace"`
	Actor    string `json:"actor"`
	ActorUID string `json:"actorUid"`
	// From and To are the states before and after the change; equal for
	// a failure that left the state alone.
	From ActorState `json:"from,omitempty"`
	To   ActorState `json:"to"`
	// Worker and Node say where the actor was or went, when known.
	Worker  string `json:"worker,omitempty"`
	Node    string `json:"node,omitempty"`
	Message string `json:"message,omitempty"`
	// Record is the actor as this change left it (nil when it was
	// deleted), so a watcher shows every state it passed through, not
	// only the one it finds when it reads.
	Record *Actor `json:"record,omitempty"`
}

// EventFilter selects events for ListEvents.
type EventFilter struct {
	// Atespace and Actor restrict the result when not empty; Actor needs
	// Atespace.
	Atespace, Actor string
	// After returns only events with Seq > After.
	After int64
	// Limit caps the number returned (the oldest first); 0 means no cap.
	Limit int
	// Newest, with Limit, returns the newest Limit matching events
	// instead of the oldest (still oldest first in the slice).
	Newest bool
}

// Events is the event part of the Store contract.
type Events interface {
	// AppendEvent stores e with the next sequence number, which it sets
	// in e.Seq.
	AppendEvent(ctx context.Context, e *Event) error
	// AppendEvents stores es in one transaction, in slice order, each
	// with the next sequence number (set in its Seq): AppendEvent for
	// each, with one commit for all (none stored on error).
	AppendEvents(ctx context.Context, es []*Event) error
	// ListEvents returns the events f selects, in Seq order.
	ListEvents(ctx context.Context, f EventFilter) ([]*Event, error)
	// PruneEvents deletes events older than before and all but the
	// newest keep events, and returns how many it deleted.
	PruneEvents(ctx context.Context, before time.Time, keep int) (int, error)
}
