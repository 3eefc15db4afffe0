package up

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/router"
	"substrate.dev/ate/internal/runner"
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
	parts, err := newRouter(rc, atev1.NewControlClient(conn), tr, ms, log)
	if err != nil {
		return err
	}
	r := runner.New(log)
	if ms != nil {
		mgmt, err := newManagementServer(cfg.ManagementAddr, ms, parts.handler.Ready)
		if err != nil {
			return err
		}
		defer mgmt.Close()
		// First in, last out: it outlives the drain, so the drain can be
		// watched.
		r.Add("management", mgmt.Serve)
	}
	stopPprof, err := httpserve.StartPprof(ctx, cfg.PprofAddr)
	if err != nil {
		return err
	}
	defer stopPprof()
	parts.add(r)
	log.Info("ate router ready", "router", parts.server.Addr(), "api", cfg.API)
	if cfg.Ready != nil {
		cfg.Ready(parts.server.Addr())
	}
	return r.Run(ctx)
}

// routerParts is the router as `ate up` and `ate router` both run it.
type routerParts struct {
	handler *router.Handler
	server  *httpserve.Server
}

// newRouter assembles the router of rc over the Control API client c:
// its handler (as the API's router component, through tr, which may be
// nil for plaintext) and its drainable server, listening. ms may be nil.
func newRouter(rc RouterConfig, c atev1.ControlClient, tr *pki.Transport, ms *metrics.Metrics, log *slog.Logger) (routerParts, error) {
	res := router.NewControlResolver(c, log)
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
	rs := httpserve.NewServer("router", rc.Addr, rh, log)
	rs.DrainDelay, rs.DrainTimeout = rc.DrainDelay, rc.DrainTimeout
	if err := rs.Listen(); err != nil {
		return routerParts{}, err
	}
	return routerParts{handler: rh, server: rs}, nil
}

// add adds the router to r: its idle loop, then its server, which stops
// (drains) first.
func (p routerParts) add(r *runner.Runner) {
	r.Add("router idle loop", p.handler.Start)
	r.Add("router", p.server.Start)
}
