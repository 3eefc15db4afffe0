package nodeagent

import (
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
)

// A node proves its name with its certificate (internal/pki): the
// registry binds every node call to it, so a node can register and
// report only as itself, only its own workers, and ask suspension only
// for actors on them. Calls without a component principal (plaintext
// installations; users, whom the API's authorisation decides on) are
// not bound here.

// boundNode returns the node name ctx's caller proved, and whether it
// proved one; a component other than a node is refused.
func boundNode(ctx context.Context) (string, bool, error) {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Component == nil {
		return "", false, nil
	}
	if p.Component.Component != auth.ComponentNode {
		return "", false, status.Errorf(codes.PermissionDenied, "%s may not call the node registry: only nodes may", p)
	}
	return p.Component.Name, true, nil
}

// checkNodeCaller refuses (PermissionDenied) a node caller whose
// certificate names another node than name.
func checkNodeCaller(ctx context.Context, name string) (bound bool, err error) {
	certName, bound, err := boundNode(ctx)
	if err != nil || !bound {
		return bound, err
	}
	if certName != name {
		return true, status.Errorf(codes.PermissionDenied, "node %s's certificate may not act as node %s", certName, name)
	}
	return true, nil
}

// checkHelloWorkers refuses (PermissionDenied) a bound node's hello
// listing a worker the record store gives another node.
func (r *Registry) checkHelloWorkers(ctx context.Context, h *atev1.NodeHello) error {
	all, err := r.cfg.Store.ListWorkers(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "read workers: %v", err)
	}
	for _, w := range all {
		if w.Node != h.GetNode() && slices.ContainsFunc(h.GetWorkers(), func(n *atev1.NodeWorker) bool { return n.GetName() == w.Name }) {
			return status.Errorf(codes.PermissionDenied, "worker %s is node %s's, not %s's", w.Name, w.Node, h.GetNode())
		}
	}
	return nil
}

// checkReport refuses (PermissionDenied) a bound node's heartbeat or
// event naming a worker that is not one of m's.
func checkReport(m *member, in *atev1.NodeMessage) error {
	var workers []string
	switch msg := in.GetMsg().(type) {
	case *atev1.NodeMessage_Heartbeat:
		for _, a := range msg.Heartbeat.GetActivity() {
			workers = append(workers, a.GetWorker())
		}
		for _, s := range msg.Heartbeat.GetStandbys() {
			workers = append(workers, s.GetWorkers()...)
		}
	case *atev1.NodeMessage_Event:
		if w := msg.Event.GetWorker(); w != "" {
			workers = append(workers, w)
		}
	}
	for _, w := range workers {
		if !slices.Contains(m.workers, w) {
			return status.Errorf(codes.PermissionDenied, "node %s reported worker %s, which is not its own", m.name, w)
		}
	}
	return nil
}
