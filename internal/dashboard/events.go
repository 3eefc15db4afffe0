package dashboard

import (
	"context"
	"time"
)

// Event is one entry of the "Recent events" table. The dashboard knows
// no event source of its own: an EventLister adapts one (the Control
// API's event listing) to this shape.
type Event struct {
	Time time.Time
	// Type is the event's kind, e.g. "ActorResumed".
	Type string
	// Object names what it is about, e.g. "default/counter-1" or a node.
	Object string
	// Message says what happened, for people.
	Message string
	// Warning marks failures, drawn in the warning colour.
	Warning bool
}

// EventLister lists recent events for the dashboard.
//
// This is the seam for the Control API's ListEvents: an adapter calling
// it through the same ControlClient the dashboard uses (so the caller's
// authorisation applies) goes into Config.Events where internal/up wires
// the dashboard. Until then a nil Config.Events means NoEvents.
type EventLister interface {
	// RecentEvents returns at most limit events, newest first, that
	// ctx's caller may see. Errors are shown in the events section.
	RecentEvents(ctx context.Context, limit int) ([]Event, error)
}

// EventListerFunc adapts a function to EventLister.
type EventListerFunc func(ctx context.Context, limit int) ([]Event, error)

// RecentEvents calls f.
func (f EventListerFunc) RecentEvents(ctx context.Context, limit int) ([]Event, error) {
	return f(ctx, limit)
}

var _ EventLister = EventListerFunc(nil)

// NoEvents is the EventLister of a server without an event source (a nil
// Config.Events): it lists nothing, and the dashboard says that no
// events are recorded yet.
type NoEvents struct{}

var _ EventLister = NoEvents{}

// RecentEvents returns no events and no error.
func (NoEvents) RecentEvents(context.Context, int) ([]Event, error) { return nil, nil }
