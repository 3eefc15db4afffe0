package apiserver

import (
	"context"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// NodeLister lists the node agents the API server knows
// (nodeagent.Registry, or the one node of `ate up`).
type NodeLister interface {
	List(ctx context.Context) ([]*atev1.Node, error)
}

// SetNodes makes ListNodes answer from l. Call it before serving.
func (s *Server) SetNodes(l NodeLister) { s.nodes = l }

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
