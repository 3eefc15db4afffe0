package lifecycle

import (
	"context"
	"time"

	"substrate.dev/ate/internal/clock"
	"substrate.dev/ate/internal/store"
)

// Event retention (docs/logs-and-events.md): the store keeps events for
// EventMaxAge and at most EventMaxCount of them (every atespace
// together), whichever bound is hit first. A day covers "what happened
// overnight"; 10,000 events of ~1 KiB each (the actor record included)
// stay near 10 MiB of store.
const (
	EventMaxAge   = 24 * time.Hour
	EventMaxCount = 10000
	// pruneEvery is how many appended events pass between prunes: a
	// prune scans the oldest events, so it runs now and then, never per
	// event; the count bound may thus be exceeded by up to this many.
	pruneEvery = 100
	// eventQueue bounds the events waiting for the store: a workflow
	// never waits for its event's write (it would add an fsync to every
	// step); when the store falls this far behind, new events are
	// dropped and logged rather than block state changes.
	eventQueue = 1024
	// eventBatch bounds the events writeEvents appends in one
	// transaction.
	eventBatch = 256
	// eventLinger is how long writeEvents waits after an event for more
	// to write with it: a wake-up's four events come within a few
	// milliseconds.
	eventLinger = 10 * time.Millisecond
)

// eventType classifies the change from → to with its message: a failure
// is a Warning, a transition that went as asked is Normal.
func eventType(from, to store.ActorState) store.EventType {
	switch {
	case to == store.Crashed:
		return store.EventWarning
	case from == store.Resuming && to != store.Running:
		return store.EventWarning
	case (from == store.Suspending || from == store.Pausing) && to == store.Running:
		return store.EventWarning
	}
	return store.EventNormal
}

// recordDeleted queues the event of a's deletion, why saying by whom.
func (m *Manager) recordDeleted(a *store.Actor, why string) {
	e := &store.Event{Time: clock.Now().UTC(), Type: store.EventNormal, Atespace: a.Atespace, Actor: a.Name, ActorUID: a.UID,
		From: a.State, To: store.Deleted, Message: why}
	m.queueEvent(e)
}

// recordChange queues the event of a workflow's write that moved base to
// out. A write that left the state as it was records
// nothing (a merged retry, a pointer move). The actor's message is the
// event's only when this write set it, or when the event is a Warning:
// a record keeps its message across later transitions (a resume still
// carries "suspended by request"), which would describe the wrong event.
func (m *Manager) recordChange(base, out *store.Actor) {
	if out.State == base.State {
		return
	}
	cp := *out
	e := &store.Event{Time: clock.Now().UTC(), Atespace: out.Atespace, Actor: out.Name, ActorUID: out.UID,
		From: base.State, To: out.State, Record: &cp, Worker: out.Worker}
	if e.Worker == "" {
		e.Worker = base.Worker
	}
	if e.Worker != "" {
		if n, ok := m.nodes.ForWorker(e.Worker); ok {
			e.Node = n.Name()
		}
	}
	if e.Node == "" {
		e.Node = out.Node // a PAUSED actor's node
	}
	e.Type = eventType(e.From, e.To)
	if out.Message != base.Message || e.Type == store.EventWarning {
		e.Message = out.Message
	}
	m.queueEvent(e)
}

// queueEvent hands e to writeEvents, or drops it when the queue is full.
func (m *Manager) queueEvent(e *store.Event) {
	select {
	case m.events <- e:
	default:
		m.log.Warn("event queue full; event dropped", "actor", e.Atespace+"/"+e.Actor, "from", e.From, "to", e.To)
	}
}

// writeEvents appends queued events to the store, in queue order, until
// ctx ends and the queue is empty, and prunes every pruneEvery events.
// After the first event it waits up to eventLinger for more, and what has
// queued by then goes in one transaction (up to eventBatch events): a
// wake-up queues four events, and a transaction each cost four extra
// fsync'd commits per wake-up on bbolt and four PostgreSQL transactions
// (BENCHMARKS.md, Control plane over the node protocol). Events are
// after-the-fact records that never held up a workflow, so they show
// up to eventLinger later.
func (m *Manager) writeEvents(ctx context.Context) {
	n := 0
	batch := make([]*store.Event, 0, eventBatch)
	write := func() {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := m.store.AppendEvents(wctx, batch); err != nil {
			for _, e := range batch {
				m.log.Warn("write event", "actor", e.Atespace+"/"+e.Actor, "to", e.To, "err", err)
			}
			return
		}
		before := n
		if n += len(batch); n/pruneEvery != before/pruneEvery {
			if _, err := m.store.PruneEvents(wctx, time.Now().Add(-EventMaxAge), EventMaxCount); err != nil {
				m.log.Warn("prune events", "err", err)
			}
		}
	}
	// fill adds what is queued now to batch, up to eventBatch events.
	fill := func() {
		for len(batch) < eventBatch {
			select {
			case e := <-m.events:
				batch = append(batch, e)
			default:
				return
			}
		}
	}
	linger := time.NewTimer(eventLinger)
	linger.Stop()
	for {
		select {
		case e := <-m.events:
			batch = append(batch[:0], e)
			linger.Reset(eventLinger)
		wait:
			for len(batch) < eventBatch {
				select {
				case e := <-m.events:
					batch = append(batch, e)
				case <-linger.C:
					break wait
				case <-ctx.Done():
					break wait
				}
			}
			linger.Stop()
			fill()
			write()
		case <-ctx.Done():
			for {
				batch = batch[:0]
				if fill(); len(batch) == 0 {
					return
				}
				write()
			}
		}
	}
}
