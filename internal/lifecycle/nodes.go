package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/actorlog"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
)

// The workflows find their nodes through a nodeapi.Nodes (New) and are
// told what the nodes report through nodeapi.Events.
var _ nodeapi.Events = (*Manager)(nil)

// ErrNodeUnavailable: the node a workflow step needs is not registered
// (lost, or never joined).
var ErrNodeUnavailable = errors.New("node unavailable")

// nodeOf returns the node owning worker, or ErrNodeUnavailable.
func (m *Manager) nodeOf(worker string) (nodeapi.Node, error) {
	n, ok := m.nodes.ForWorker(worker)
	if !ok {
		return nil, fmt.Errorf("%w: no live node owns worker %s", ErrNodeUnavailable, worker)
	}
	return n, nil
}

// nodeNamed returns the live node called name, or ErrNodeUnavailable.
func (m *Manager) nodeNamed(name string) (nodeapi.Node, error) {
	n, ok := m.nodes.Get(name)
	if !ok {
		return nil, fmt.Errorf("%w: node %s is not registered", ErrNodeUnavailable, name)
	}
	return n, nil
}

// standbyWorkers lists, across live nodes, the free workers holding a
// sandbox prepared for the template; claims prefer them.
func (m *Manager) standbyWorkers(spec *atev1.ActorTemplateSpec, imageDigest string) []string {
	var out []string
	for _, n := range m.nodes.All() {
		out = append(out, n.StandbyWorkers(spec, imageDigest)...)
	}
	return out
}

// forgetActor tells every live node to drop what it keeps of an actor.
func (m *Manager) forgetActor(actorUID string) {
	for _, n := range m.nodes.All() {
		n.ForgetActor(actorUID)
	}
}

// WorkersLost is the node registry's report that workers are gone with
// their sandboxes (their node stopped heartbeating, or came back as a new
// process without them): each actor holding one becomes CRASHED at its
// last durable snapshot, resumable on any other node, with why as its
// message; then the workers leave the pool. A PAUSED actor whose node is
// gone falls back to its durable snapshot at its next resume (sourceFor).
// It tries every worker and returns the first error.
// ClaimsNotHosted handles claimed workers that a node's hello, received
// at seen, shows not hosting the actor the store gives them: the actor
// lost its sandbox and goes CRASHED at its last snapshot (resumable) —
// unless its record was written since the node spoke (less
// clockMargin, for the replicas' clocks): then a workflow moved it on
// meanwhile (a start under way when the hello was built, perhaps by
// another replica) and the hello is stale about it. The workers stay
// registered. Safe to call with the workflows' leases held elsewhere: it
// takes each actor's lease in turn.
func (m *Manager) ClaimsNotHosted(ctx context.Context, workers []*store.Worker, why string, seen time.Time) error {
	var first error
	for _, w := range workers {
		err := m.crashHolderIf(ctx, w, why, func(a *store.Actor) bool { return a.StateTime.Before(seen.Add(-clockMargin)) })
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// clockMargin is how far apart API server replicas' clocks may be for
// ClaimsNotHosted's comparison of a record's StateTime (the writer's
// clock) with when a hello arrived (ours).
const clockMargin = time.Second

// WorkersLost crashes the actors holding workers (their node lost them)
// and unregisters the workers.
func (m *Manager) WorkersLost(ctx context.Context, workers []*store.Worker, why string) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, w := range workers {
		if !w.Free() {
			keep(m.crashHolder(ctx, w, why))
		}
		keep(m.store.DeleteWorker(ctx, w.Name))
	}
	return first
}

// ReadActorLogs returns the lines of actorUID's log after the cursor from
// every live node, merged in (run, seq) order. A node that fails to
// answer is logged and left out: a follower (actorlog.Follower) holds
// later runs back while a run's end is missing.
func (m *Manager) ReadActorLogs(ctx context.Context, actorUID string, after actorlog.Cursor) ([]actorlog.Line, error) {
	var out []actorlog.Line
	for _, n := range m.nodes.All() {
		ls, err := n.ReadActorLogs(ctx, actorUID, after, 0)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			m.log.WarnContext(ctx, "read actor log", "node", n.Name(), "actor_uid", actorUID, "err", err)
			continue
		}
		out = append(out, ls...)
	}
	actorlog.Sort(out)
	return out, nil
}

// NodeOf returns the live node owning worker, or an error wrapping
// ErrNodeUnavailable: for calls that reach a running actor's node
// outside a workflow (`ate exec`, `ate cp`).
func (m *Manager) NodeOf(worker string) (nodeapi.Node, error) { return m.nodeOf(worker) }
