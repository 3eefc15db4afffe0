package nodeagent

import (
	"context"
	"fmt"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/store"
)

// Drain is DrainNode (the Kubernetes controller's call for a terminating
// worker Pod): the node gets no new actors, and its running actors are
// suspended and its paused checkpoints uploaded in the background
// (nodeapi.Events.SuspendNode), as when the node drains itself on
// SIGTERM. The drain sticks to the name: a node that re-registers (its
// stream broke) comes back DRAINING and is drained again, until Remove.
// It returns the node as ListNodes shows it; store.ErrNotFound (wrapped)
// for a node this registry does not know.
//
// Every replica learns the drain from the node: this one sends it a
// drain order (now, and on each of its sessions until Remove), and the
// node reports DRAIN to every replica, as on SIGTERM, so none places
// actors on it. A node this replica cannot reach is told when it
// registers here again.
func (r *Registry) Drain(ctx context.Context, name, reason string) (*atev1.Node, error) {
	r.mu.Lock()
	m := r.members[name]
	if m == nil {
		r.mu.Unlock()
		return nil, fmt.Errorf("node %s: %w", name, store.ErrNotFound)
	}
	if r.draining == nil {
		r.draining = map[string]string{}
	}
	r.draining[name] = reason
	if m.phase == atev1.Node_READY {
		m.phase = atev1.Node_DRAINING
	}
	live := m.live()
	wf := r.wf
	send := m.send
	r.mu.Unlock()
	if send != nil {
		if err := send(drainOrder(reason)); err != nil {
			r.log.WarnContext(ctx, "tell a node it drains; it is told when it registers again", "node", name, "err", err)
		}
	}
	if live && wf != nil {
		finished := r.drain(ctx, m, wf, reason)
		go func() {
			<-finished
			msg := "drained (" + reason + ")"
			if m.drainErr != nil {
				msg = "drain (" + reason + ") failed: " + m.drainErr.Error()
			}
			r.mu.Lock()
			if r.members[name] == m && m.phase == atev1.Node_DRAINING {
				m.message = msg
			}
			r.mu.Unlock()
		}()
	}
	return r.describe(ctx, name)
}

// Remove is RemoveNode (the Kubernetes controller's call for a deleted
// worker Pod): the node is declared lost now instead of at the heartbeat
// deadline, so its actors become CRASHED at their last durable snapshot
// and resume elsewhere at their next request, and every worker record of
// the node leaves the store (nodeapi.Events.WorkersLost), also those of
// a node this replica never heard from. The name is forgotten: ListNodes
// no longer shows it. Removing an unknown node succeeds.
func (r *Registry) Remove(ctx context.Context, name, reason string) error {
	why := "removed: " + reason
	r.declareLost(ctx, name, 0, why)
	workers, err := r.workersOf(ctx, name)
	if err != nil {
		return err
	}
	if wf := r.workflows(); wf != nil && len(workers) > 0 {
		if err := wf.WorkersLost(ctx, workers, "node "+name+" "+why+": memory since the last snapshot was lost"); err != nil {
			return err
		}
	}
	r.mu.Lock()
	if m := r.members[name]; m != nil && m.phase == atev1.Node_LOST {
		// Its connection goes with it: Close no longer reaches it.
		if m.remote != nil {
			m.remote.close()
		}
		delete(r.members, name)
	}
	delete(r.draining, name)
	r.mu.Unlock()
	r.log.InfoContext(ctx, "node removed", "node", name, "reason", reason)
	return nil
}

// drainOrder is the message that tells a node it was drained for
// reason.
func drainOrder(reason string) *atev1.RegistryMessage {
	return &atev1.RegistryMessage{Msg: &atev1.RegistryMessage_Drain{Drain: &atev1.DrainOrder{Reason: reason}}}
}

// describe returns node name as List shows it.
func (r *Registry) describe(ctx context.Context, name string) (*atev1.Node, error) {
	nodes, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.GetName() == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("node %s: %w", name, store.ErrNotFound)
}
