package apiserver

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"substrate.dev/ate/internal/store"
)

// StoreHealth answers gRPC's health check (grpc.health.v1.Health/Check)
// for the whole server: SERVING while this replica reaches its record
// store, NOT_SERVING from the second ping in a row that fails or takes
// longer than storePingTimeout until one succeeds. One slow ping is not
// enough: when every replica's pings are slow at once (a database busy
// or restarting), each would hand its changes to another that fares no
// better.
//
// Clients ask it while a state change they sent here takes long
// (apidial's watched calls): a replica that answers is working on the
// change and keeps it, but one cut off from its store cannot finish it
// until the cut heals, and its statements wait for TCP to give up first
// (seconds). Told NOT_SERVING, the client sends the change to another
// replica, which the actor's lease keeps from running it alongside.
//
// The check is public (auth.Public): it takes no credential and says
// nothing of any atespace, as a load balancer's or kubelet's probe
// expects. It reads a cached status and never reaches the store itself.
type StoreHealth struct {
	healthpb.UnimplementedHealthServer
	pinger store.Pinger
	log    *slog.Logger
	// cut is set from the second failed ping in a row until one
	// succeeds.
	cut atomic.Bool
	// every and timeout are storePingEvery and storePingTimeout
	// (tests shorten them).
	every, timeout time.Duration
}

const (
	// storePingEvery is how often StoreHealth pings the store: a cut is
	// reported within two pings, 2*storePingTimeout+storePingEvery.
	storePingEvery = 500 * time.Millisecond
	// storePingTimeout is far above a ping's round trip (under a
	// millisecond on a LAN, a few on a loaded database: it runs no
	// statement and waits for no disk) and far below the seconds a
	// change waits on a cut connection.
	storePingTimeout = time.Second
)

// NewStoreHealth returns the health check of a server over st. A store
// that cannot be pinged (store.Pinger) is always reached.
func NewStoreHealth(st store.Store, log *slog.Logger) *StoreHealth {
	p, _ := st.(store.Pinger)
	return &StoreHealth{pinger: p, log: log, every: storePingEvery, timeout: storePingTimeout}
}

// Check answers for the server as a whole, whatever service is named:
// every service of an API server needs its store.
func (h *StoreHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if h.cut.Load() {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// Run pings the store until ctx ends, logging each change of status.
func (h *StoreHealth) Run(ctx context.Context) error {
	if h.pinger == nil {
		return nil
	}
	t := time.NewTicker(h.every)
	defer t.Stop()
	failed := 0
	for {
		pctx, cancel := context.WithTimeout(ctx, h.timeout)
		err := h.pinger.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			failed++
		} else {
			failed = 0
		}
		switch was := h.cut.Swap(failed >= 2); {
		case failed >= 2 && !was:
			h.log.WarnContext(ctx, "record store out of reach: the health check answers NOT_SERVING, so clients move their changes to other replicas", "err", err)
		case failed == 0 && was:
			h.log.InfoContext(ctx, "record store reached again: the health check answers SERVING")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
