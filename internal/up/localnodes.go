package up

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/nodeagent"
	"substrate.dev/ate/internal/store"
)

// localNodes answers ListNodes for `ate up`: its one in-process node,
// always READY.
type localNodes struct {
	name, tunnel string
	store        store.Store
}

func (l localNodes) List(ctx context.Context) ([]*atev1.Node, error) {
	workers, err := l.store.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	n := &atev1.Node{Name: l.name, Phase: nodeagent.PhaseReady, Address: "in-process", TunnelAddress: l.tunnel,
		LastHeartbeat: timestamppb.New(time.Now())}
	for _, w := range workers {
		if w.Node == l.name {
			n.Workers++
			if w.Free() {
				n.FreeWorkers++
			}
		}
	}
	return []*atev1.Node{n}, nil
}

// Drain refuses: `ate up`'s node is in the same process and leaves with
// it (SIGTERM suspends its actors).
func (l localNodes) Drain(context.Context, string, string) (*atev1.Node, error) {
	return nil, fmt.Errorf("ate up's in-process node %s cannot be drained: stop ate up to suspend its actors: %w", l.name, lifecycle.ErrFailedPrecondition)
}

// Remove refuses, as Drain.
func (l localNodes) Remove(context.Context, string, string) error {
	return fmt.Errorf("ate up's in-process node %s cannot be removed: %w", l.name, lifecycle.ErrFailedPrecondition)
}
