package apiserver

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// recordingNodes is the Nodes neighbour: it records what reaches it.
type recordingNodes struct{ drained, removed []string }

func (r *recordingNodes) List(context.Context) ([]*atev1.Node, error) { return nil, nil }
func (r *recordingNodes) Drain(_ context.Context, name, _ string) (*atev1.Node, error) {
	r.drained = append(r.drained, name)
	return &atev1.Node{Name: name, Phase: atev1.Node_DRAINING}, nil
}
func (r *recordingNodes) Remove(_ context.Context, name, _ string) error {
	r.removed = append(r.removed, name)
	return nil
}

// Bad node names and oversized reasons are refused at the edge with
// INVALID_ARGUMENT, and nothing reaches the registry.
func TestNodeCallsValidate(t *testing.T) {
	tests := []struct {
		name, node, reason string
		code               codes.Code
	}{
		{"ok", "pool-a-1", "pod default/pool-a-1 terminating", codes.OK},
		{"empty name", "", "x", codes.InvalidArgument},
		{"not a DNS label", "Pool_A", "x", codes.InvalidArgument},
		{"reason too long", "pool-a-1", strings.Repeat("x", maxReason+1), codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := &recordingNodes{}
			s := &Server{nodes: nodes}
			_, derr := s.DrainNode(t.Context(), &atev1.DrainNodeRequest{Name: tt.node, Reason: tt.reason})
			_, rerr := s.RemoveNode(t.Context(), &atev1.RemoveNodeRequest{Name: tt.node, Reason: tt.reason})
			for _, err := range []error{derr, rerr} {
				if got := status.Code(err); got != tt.code {
					t.Fatalf("code = %s (%v), want %s", got, err, tt.code)
				}
			}
			if reached := len(nodes.drained) + len(nodes.removed); (tt.code == codes.OK) != (reached == 2) {
				t.Fatalf("registry reached %d times for a %s call", reached, tt.code)
			}
		})
	}
	// Without nodes (no registry) the calls say so.
	s := &Server{}
	if _, err := s.DrainNode(t.Context(), &atev1.DrainNodeRequest{Name: "n"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("DrainNode without nodes = %v, want FAILED_PRECONDITION", err)
	}
}
