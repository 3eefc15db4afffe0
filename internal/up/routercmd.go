package up

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sync/errgroup"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/router"
)

// RouterRunConfig configures `ate router`: the HTTP router alone, asking
// the API server at API for actors and reaching every node's worker
// tunnel at the address its workers record.
type RouterRunConfig struct {
	API    string
	Router RouterConfig
	// ManagementAddr serves /healthz, /readyz and /metrics; empty means
	// none.
	ManagementAddr string
	// PprofAddr serves net/http/pprof (httpserve.NewPprof: loopback
	// only); empty means none.
	PprofAddr string
	// TLS: --tls-dir (a router certificate), --insecure, --trust-domain.
	TLS    pki.Settings
	Logger *slog.Logger
	// Ready, if set, is called with the router's address once it serves.
	Ready func(addr string)
}

// RunRouter serves until ctx ends, then drains (httpserve.Server): parked
// requests finish or time out within the drain.
func RunRouter(ctx context.Context, cfg RouterRunConfig) error {
	log := orDiscard(cfg.Logger)
	if cfg.API == "" {
		return errors.New("--api: the API server's address is required")
	}
	rc := cfg.Router
	rc.Addr = orDefault(rc.Addr, DefaultRouterAddr)
	if rc.DrainTimeout <= 0 {
		rc.DrainTimeout = router.DefaultDrainTimeout
	}
	flushTraces, err := startTracing(ctx, "ate-router", log)
	if err != nil {
		return err
	}
	defer flushTraces()
	tr, err := cfg.TLS.Load(ctx, auth.ComponentRouter, log)
	if err != nil {
		return err
	}
	var ms *metrics.Metrics
	if cfg.ManagementAddr != "" {
		ms = metrics.New()
	}
	conn, err := dialAPI(ctx, cfg.API, log, append(grpcMetrics(ms).DialOptions(), tr.DialOption(auth.ComponentAPIServer))...)
	if err != nil {
		return fmt.Errorf("--api: %w", err)
	}
	defer conn.Close()
	res := router.NewControlResolver(atev1.NewControlClient(conn), log)
	hc := rc.Handler
	hc.Idler, hc.Activity = res, res
	hc.TunnelTLS = tr.HTTPClientConfig(auth.ComponentNode)
	if nt := tr.NewNodeTransport(router.NewTunnelTransport()); nt != nil {
		// Each worker's tunnel must be its own node's.
		hc.Transport = nt
	}
	hc.Loopback = router.LoopbackAddr(rc.Addr)
	if ms != nil {
		hc.Metrics = ms.Router
	}
	rh := router.NewHandler(hc, res, log)
	var mgmt *httpserve.Management
	if ms != nil {
		// The management /readyz is what a readiness probe asks: it says
		// draining as the router's own /readyz does.
		if mgmt, err = newManagementServer(cfg.ManagementAddr, ms, rh.Ready); err != nil {
			return err
		}
		defer mgmt.Close()
	}
	stopPprof, err := httpserve.StartPprof(ctx, cfg.PprofAddr)
	if err != nil {
		return err
	}
	defer stopPprof()
	rs := httpserve.NewServer("router", rc.Addr, rh, log)
	rs.DrainDelay, rs.DrainTimeout = rc.DrainDelay, rc.DrainTimeout
	if err := rs.Listen(); err != nil {
		return err
	}
	loopCtx, stopLoop := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLoop()
	loopDone := make(chan error, 1)
	go func() { loopDone <- rh.Start(loopCtx) }()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return rs.Start(gctx) })
	// The management listener outlives the drain, so it can be watched.
	mctx, stopMgmt := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMgmt()
	if mgmt != nil {
		go func() { _ = mgmt.Serve(mctx) }()
	}
	log.Info("ate router ready", "router", rs.Addr(), "api", cfg.API)
	if cfg.Ready != nil {
		cfg.Ready(rs.Addr())
	}
	err = g.Wait()
	stopLoop()
	<-loopDone
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
