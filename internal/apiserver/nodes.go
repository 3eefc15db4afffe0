package apiserver

import (
	"context"
	"fmt"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/names"
)

// Nodes is the node agents the API server knows (nodeagent.Registry, or
// the one node of `ate up`).
type Nodes interface {
	List(ctx context.Context) ([]*atev1.Node, error)
	// Drain and Remove are DrainNode and RemoveNode (control.proto).
	// Errors: store.ErrNotFound for an unknown node (Drain only),
	// lifecycle.ErrFailedPrecondition where nodes cannot be drained.
	Drain(ctx context.Context, name, reason string) (*atev1.Node, error)
	Remove(ctx context.Context, name, reason string) error
}

// SetNodes makes the node RPCs answer from n. Call it before serving.
func (s *Server) SetNodes(n Nodes) { s.nodes = n }

// ListNodes implements atev1.ControlServer.
func (s *Server) ListNodes(ctx context.Context, _ *atev1.ListNodesRequest) (*atev1.ListNodesResponse, error) {
	if s.nodes == nil {
		return &atev1.ListNodesResponse{}, nil
	}
	nodes, err := s.nodes.List(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &atev1.ListNodesResponse{Nodes: nodes}, nil
}

// DrainNode implements atev1.ControlServer.
func (s *Server) DrainNode(ctx context.Context, req *atev1.DrainNodeRequest) (*atev1.Node, error) {
	if err := validNodeCall(req.GetName(), req.GetReason()); err != nil {
		return nil, toStatus(err)
	}
	if s.nodes == nil {
		return nil, toStatus(fmt.Errorf("this API server has no nodes: %w", lifecycle.ErrFailedPrecondition))
	}
	n, err := s.nodes.Drain(ctx, req.GetName(), req.GetReason())
	return n, toStatus(err)
}

// RemoveNode implements atev1.ControlServer.
func (s *Server) RemoveNode(ctx context.Context, req *atev1.RemoveNodeRequest) (*atev1.RemoveNodeResponse, error) {
	if err := validNodeCall(req.GetName(), req.GetReason()); err != nil {
		return nil, toStatus(err)
	}
	if s.nodes == nil {
		return nil, toStatus(fmt.Errorf("this API server has no nodes: %w", lifecycle.ErrFailedPrecondition))
	}
	if err := s.nodes.Remove(ctx, req.GetName(), req.GetReason()); err != nil {
		return nil, toStatus(err)
	}
	return &atev1.RemoveNodeResponse{}, nil
}

// maxReason bounds a DrainNode/RemoveNode reason, which lands in logs
// and in node and actor messages.
const maxReason = 256

func validNodeCall(name, reason string) error {
	if err := names.ValidateLabel("node name", name); err != nil {
		return err
	}
	if len(reason) > maxReason {
		return fmt.Errorf("reason is %d bytes, at most %d: %w", len(reason), maxReason, errInvalid)
	}
	return nil
}
