package up

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
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
