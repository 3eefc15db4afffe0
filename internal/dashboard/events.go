package dashboard

import (
	"context"
	"time"

	"google.golang.org/grpc"

	atev1 "substrate.dev/ate/api/ate/v1"
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

// EventLister lists recent events for the dashboard: ControlEvents in
// `ate up` and `ate apiserver`, NoEvents where there is no source.
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

// EventsClient is the part of atev1.ControlClient ControlEvents calls.
type EventsClient interface {
	ListEvents(ctx context.Context, in *atev1.ListEventsRequest, opts ...grpc.CallOption) (*atev1.ListEventsResponse, error)
}

// ControlEvents lists recent events through the Control API's ListEvents
// (docs/logs-and-events.md), with the dashboard's own client, so the
// caller's authorisation applies. ListEvents answers oldest first; the
// dashboard shows newest first. An event's Type is the state the actor
// went to ("DELETED" for a deletion), and its Message the event's own
// message or, where it has none, the transition and the worker.
func ControlEvents(c EventsClient) EventLister {
	return EventListerFunc(func(ctx context.Context, limit int) ([]Event, error) {
		resp, err := c.ListEvents(ctx, &atev1.ListEventsRequest{Limit: int32(limit)})
		if err != nil {
			return nil, err
		}
		evs := resp.GetEvents()
		out := make([]Event, 0, len(evs))
		for i := len(evs) - 1; i >= 0; i-- {
			out = append(out, eventOf(evs[i]))
		}
		return out, nil
	})
}

// eventOf is ev in the dashboard's shape.
func eventOf(ev *atev1.Event) Event {
	msg := ev.GetMessage()
	if msg == "" {
		msg = ev.GetFromState() + " → " + ev.GetToState()
		if w := ev.GetWorker(); w != "" {
			msg += " on " + w
		}
	}
	return Event{
		Time:    ev.GetTime().AsTime(),
		Type:    ev.GetToState(),
		Object:  ev.GetAtespace() + "/" + ev.GetActor(),
		Message: msg,
		Warning: ev.GetType() == "Warning",
	}
}
