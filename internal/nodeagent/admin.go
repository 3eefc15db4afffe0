package nodeagent

import (
	"context"
	"fmt"
	"time"

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
// The drain is a record in the store (store.NodeDrain), written before
// anything else: every replica reads it (syncDrains, and at each
// registration), so none places actors on the node, whichever replica
// was asked, whether it reaches the node or not, and across restarts of
// the node and the replicas, until Remove. The node hears it too: a
// drain order on each of its sessions, after which it reports DRAIN to
// every replica, as on SIGTERM.
func (r *Registry) Drain(ctx context.Context, name, reason string) (*atev1.Node, error) {
	r.mu.Lock()
	known := r.members[name] != nil
	r.mu.Unlock()
	if !known {
		return nil, fmt.Errorf("node %s: %w", name, store.ErrNotFound)
	}
	if err := r.cfg.Store.PutNodeDrain(ctx, &store.NodeDrain{Node: name, Reason: reason, CreateTime: time.Now().UTC()}); err != nil {
		return nil, fmt.Errorf("record the drain of node %s: %w", name, err)
	}
	r.applyDrain(ctx, name, reason)
	return r.describe(ctx, name)
}

// applyDrain drains node name here: its phase, a drain order on its
// session, and the drain workflow (SuspendNode) if it is live.
func (r *Registry) applyDrain(ctx context.Context, name, reason string) {
	r.mu.Lock()
	m := r.members[name]
	if r.draining == nil {
		r.draining = map[string]string{}
	}
	r.draining[name] = reason
	if m == nil {
		// Not registered here: it is drained when it registers.
		r.mu.Unlock()
		return
	}
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
}

// loadDrains notes the drains recorded in the store (without applying
// them): a registration reads them first, so a node drained through
// another replica, or before this one started, comes back DRAINING.
func (r *Registry) loadDrains(ctx context.Context) {
	drains, err := r.cfg.Store.ListNodeDrains(ctx)
	if err != nil {
		r.log.WarnContext(ctx, "read node drains", "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining == nil {
		r.draining = map[string]string{}
	}
	for _, d := range drains {
		if _, ok := r.draining[d.Node]; !ok {
			r.draining[d.Node] = d.Reason
		}
	}
}

// syncDrains applies the drains other replicas recorded (Drain) that
// this one has not: the way every replica obeys a drain, including one
// the drained node cannot reach.
func (r *Registry) syncDrains(ctx context.Context) {
	drains, err := r.cfg.Store.ListNodeDrains(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.log.WarnContext(ctx, "read node drains", "err", err)
		}
		return
	}
	for _, d := range drains {
		r.mu.Lock()
		_, known := r.draining[d.Node]
		r.mu.Unlock()
		if !known {
			r.log.InfoContext(ctx, "node drained by another replica", "node", d.Node, "reason", d.Reason)
			r.applyDrain(ctx, d.Node, d.Reason)
		}
	}
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
	if err := r.cfg.Store.DeleteNodeDrain(ctx, name); err != nil {
		return fmt.Errorf("delete the drain of node %s: %w", name, err)
	}
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
