package controller

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// supervised runs one reconcile path as a manager Runnable (leader
// only), apart from the others. controller-runtime's manager stops every
// controller when one returns an error, and a controller returns one
// when its watches do not sync in time (a permission missing); and a
// controller's watch waits for every informer of its cache to sync. So
// each path has a cache of its own, waits for its informers first,
// bounded by timeout, and on failure records the error for /readyz,
// logs it and tries again after retry with a new controller (a
// controller starts only once), while the other paths run on.
type supervised struct {
	name string
	// kinds are the objects the controller watches, resources their
	// resource names (for /readyz, matched with refusals).
	kinds     []client.Object
	resources []string
	// build makes the controller, its watches registered on cache;
	// called once the informers of kinds synced.
	build   func() (controller.Controller, error)
	cache   cache.Cache
	health  *health
	timeout time.Duration
	retry   time.Duration
	log     *slog.Logger
}

// NeedLeaderElection: only the leader reconciles.
func (s *supervised) NeedLeaderElection() bool { return true }

// Start waits for the watches, then runs the controller until ctx ends.
// Errors: building the controller (a programming error), or the
// controller's own once it runs.
func (s *supervised) Start(ctx context.Context) error {
	log := s.log.With("controller", s.name)
	// The cache lives as long as this path: stopped (and waited for)
	// on every return, an error included.
	cctx, stop := context.WithCancel(ctx)
	cacheDone := make(chan struct{})
	go func() {
		defer close(cacheDone)
		if err := s.cache.Start(cctx); err != nil {
			log.Error("cache stopped", "err", err)
		}
	}()
	defer func() { stop(); <-cacheDone }()
	for attempt := 1; ; attempt++ {
		s.health.starting(s.name, s.resources)
		err := s.waitSynced(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			c, err := s.build()
			if err != nil {
				return fmt.Errorf("controller %s: %w", s.name, err)
			}
			s.health.synced(s.name)
			log.Info("watches synced; reconciling", "attempt", attempt)
			if err := c.Start(ctx); err != nil {
				return fmt.Errorf("controller %s: %w", s.name, err)
			}
			return nil
		}
		s.health.failed(s.name, err)
		log.Error("watches not synced: this reconcile path is idle until they are; the others run on",
			"attempt", attempt, "retry_in", s.retry, "err", err)
		t := time.NewTimer(s.retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// waitSynced registers the informer of each kind in the path's cache
// and waits, within timeout, for the cache to start and them to sync.
// The informers keep retrying after a timeout, so a permission granted
// later is seen by the next attempt.
func (s *supervised) waitSynced(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for _, k := range s.kinds {
		if _, err := s.cache.GetInformer(ctx, k, cache.BlockUntilSynced(false)); err != nil {
			return fmt.Errorf("informer of %T: %w", k, err)
		}
	}
	if !s.cache.WaitForCacheSync(ctx) {
		return syncTimeoutError(s.timeout, s.resources, s.health.refusals(s.resources), ctx.Err())
	}
	return nil
}
