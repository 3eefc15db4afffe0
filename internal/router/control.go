package router

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
)

// listWorkersTimeout bounds one shared ListWorkers refresh; it is a read of
// the store, so anything slower means the API server is in trouble.
const listWorkersTimeout = 10 * time.Second

// ControlResolver is the Resolver over Substrate's Control API. Worker
// tunnel addresses come from ListWorkers and are cached by worker name;
// a name missing from the cache triggers one shared refresh.
//
// A ControlResolver is safe for concurrent use. Errors are the API's gRPC
// status errors, wrapped; conditions the router detects itself (an actor
// RUNNING without a reachable worker) are codes.Unavailable.
type ControlResolver struct {
	client atev1.ControlClient
	// refresh runs one ListWorkers at a time, shared by every miss.
	refresh coalescer

	mu sync.Mutex
	// tunnels maps worker name → tunnel host:port; guarded by mu and
	// replaced whole by each refresh, so removed workers drop out.
	tunnels map[string]string
}

var _ Resolver = (*ControlResolver)(nil)

// NewControlResolver returns a Resolver that asks client.
func NewControlResolver(client atev1.ControlClient) *ControlResolver {
	return &ControlResolver{
		client:  client,
		refresh: coalescer{timeout: listWorkersTimeout},
		tunnels: make(map[string]string),
	}
}

// Lookup implements Resolver with GetActor: ok is true only for a RUNNING
// actor.
func (c *ControlResolver) Lookup(ctx context.Context, key names.ActorKey) (Target, bool, error) {
	a, err := c.client.GetActor(ctx, &atev1.GetActorRequest{Atespace: key.Atespace, Name: key.Name})
	if err != nil {
		return Target{}, false, fmt.Errorf("get actor %s: %w", key, err)
	}
	if a.GetState() != atev1.ActorState_RUNNING {
		return Target{}, false, nil
	}
	t, err := c.target(ctx, key, a)
	if err != nil {
		return Target{}, false, err
	}
	return t, true, nil
}

// Resume implements Resolver with ResumeActor, which waits for a free
// worker until ctx's deadline and returns the RUNNING actor.
func (c *ControlResolver) Resume(ctx context.Context, key names.ActorKey) (Target, error) {
	a, err := c.client.ResumeActor(ctx, &atev1.ResumeActorRequest{Atespace: key.Atespace, Name: key.Name})
	if err != nil {
		return Target{}, fmt.Errorf("resume actor %s: %w", key, err)
	}
	if a.GetState() != atev1.ActorState_RUNNING {
		return Target{}, status.Errorf(codes.Unavailable, "actor %s is %s after resume", key, a.GetState())
	}
	return c.target(ctx, key, a)
}

// target builds a's target: its incarnation, worker and the worker's
// tunnel address.
func (c *ControlResolver) target(ctx context.Context, key names.ActorKey, a *atev1.Actor) (Target, error) {
	if a.GetWorker() == "" {
		return Target{}, status.Errorf(codes.Unavailable, "actor %s is %s but has no worker", key, a.GetState())
	}
	addr, err := c.tunnelAddr(ctx, a.GetWorker())
	if err != nil {
		return Target{}, err
	}
	return Target{Actor: key, UID: a.GetUid(), Worker: a.GetWorker(), TunnelAddr: addr}, nil
}

// tunnelAddr returns worker's tunnel address, refreshing the cache from
// ListWorkers when the worker is not in it.
func (c *ControlResolver) tunnelAddr(ctx context.Context, worker string) (string, error) {
	if addr, ok := c.cachedTunnel(worker); ok {
		return addr, nil
	}
	_, _, err := c.refresh.do(ctx, "", func(ctx context.Context) (any, error) {
		return nil, c.refreshTunnels(ctx)
	})
	if err != nil {
		return "", err
	}
	if addr, ok := c.cachedTunnel(worker); ok {
		return addr, nil
	}
	return "", status.Errorf(codes.Unavailable, "worker %s is not listed with a tunnel address", worker)
}

func (c *ControlResolver) cachedTunnel(worker string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	addr, ok := c.tunnels[worker]
	return addr, ok
}

func (c *ControlResolver) refreshTunnels(ctx context.Context) error {
	resp, err := c.client.ListWorkers(ctx, &atev1.ListWorkersRequest{})
	if err != nil {
		return fmt.Errorf("list workers: %w", err)
	}
	tunnels := make(map[string]string, len(resp.GetWorkers()))
	for _, w := range resp.GetWorkers() {
		if w.GetTunnelAddress() != "" {
			tunnels[w.GetName()] = w.GetTunnelAddress()
		}
	}
	c.mu.Lock()
	c.tunnels = tunnels
	c.mu.Unlock()
	return nil
}
