package lifecycle

import (
	"context"
	"errors"
	"fmt"

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
// ClaimsNotHosted handles claimed workers of node that its hello shows
// not hosting the actor the store gives them: the actor lost its sandbox
// and goes CRASHED at its last snapshot (resumable) — unless the node,
// asked under the actor's lease (so no workflow of it is under way),
// hosts it there now. Then the hello predated the actor's start there (a
// start under way when the node built it, perhaps by another replica, or
// a hello held up by a partition or a paused replica) and the actor is
// left as it is. No clock is compared: not a record's time, written by
// one replica, with a hello's arrival at another. A node that cannot be
// asked is left to its lease (lost, it takes its actors with it). The
// workers stay registered. Safe to call with the workflows' leases held
// elsewhere: it takes each actor's lease in turn.
func (m *Manager) ClaimsNotHosted(ctx context.Context, node string, workers []*store.Worker, why string) error {
	n, ok := m.nodes.Get(node)
	if !ok {
		return nil
	}
	var first error
	for _, w := range workers {
		err := m.crashHolderIf(ctx, w, why, func(a *store.Actor) bool {
			hosted, err := n.HostedActors(ctx)
			if err != nil {
				m.log.WarnContext(ctx, "a hello shows a claimed worker empty, but its node cannot say what it hosts now; left to the node's lease",
					"actor", a.Key(), "worker", w.Name, "err", err)
				return false
			}
			if hosted[w.Name] == a.UID {
				m.log.InfoContext(ctx, "a hello showed a claimed worker empty, but the node runs the actor there now: the hello predated its start; left as it is",
					"actor", a.Key(), "worker", w.Name, "state", a.State)
				return false
			}
			return true
		})
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

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
		keep(m.deleteWorker(ctx, w.Name, why))
	}
	return first
}

// deleteWorker deletes a lost worker, crashing first an actor that
// claimed it since it was listed: a resume may claim it meanwhile (the
// crashes before it wait for actor leases, for seconds), and deleting it
// under that actor left the actor RUNNING on no worker, every request
// for it failing (seen in the chaos run).
func (m *Manager) deleteWorker(ctx context.Context, name, why string) error {
	for range 3 {
		err := m.store.DeleteWorker(ctx, name)
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		w, gerr := m.store.GetWorker(ctx, name)
		if errors.Is(gerr, store.ErrNotFound) {
			return nil
		}
		if gerr != nil {
			return gerr
		}
		if !w.Free() {
			if err := m.crashHolder(ctx, w, why); err != nil {
				return err
			}
		}
	}
	return m.store.DeleteWorker(ctx, name)
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
