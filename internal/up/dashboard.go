package up

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/dashboard"
	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/identity"
	"substrate.dev/ate/internal/metrics"
)

// DefaultHTTPAddr is `ate up --http-addr`'s default: the web dashboard on
// loopback only, since its buttons suspend and delete actors and the
// Control API does not authenticate callers yet. `ate apiserver
// --http-addr` defaults to none, like its --management-addr: several
// replicas may share a machine, and a cluster chooses its own address.
const DefaultHTTPAddr = "127.0.0.1:7072"

// HTTPConfig configures the API server's HTTP listener, which serves the
// web dashboard (internal/dashboard, docs/dashboard.md).
type HTTPConfig struct {
	// Addr is its listen address; port 0 picks one. Empty: no listener.
	Addr string
}

// dashboardDrainTimeout bounds the dashboard's drain on shutdown: its
// requests are page reads and single actions, none long-lived.
const dashboardDrainTimeout = 5 * time.Second

// dashboardServer is the HTTP listener serving the dashboard, and the
// latency history its chart reads.
type dashboardServer struct {
	srv     *httpserve.Server
	latency *dashboard.LatencyHistory
}

// newDashboardServer listens on addr for a dashboard calling the Control
// API through c. Its latency chart draws series (all of
// dashboard.DefaultLatencySeries when empty) from ms's histograms (none
// when ms is nil); login makes it ask for an API token
// (dashboard.Config.RequireLogin). Beside it the listener serves iss's
// discovery document and JWKS (none when nil), which need no login.
// Errors: the listen's.
func newDashboardServer(addr string, c atev1.ControlClient, ms *metrics.Metrics, series []dashboard.LatencySeries, login bool, iss *identity.Issuer, log *slog.Logger) (*dashboardServer, error) {
	lc := dashboard.LatencyConfig{Series: series}
	if ms != nil {
		// A registry of ate's own collectors only: the chart's reads
		// skip the Go runtime's, which the management listener serves.
		reg := prometheus.NewRegistry()
		for _, col := range ms.Collectors() {
			if err := reg.Register(col); err != nil {
				return nil, fmt.Errorf("dashboard metrics: %w", err)
			}
		}
		lc.Gatherer = reg
	}
	lh := dashboard.NewLatencyHistory(lc)
	h, err := dashboard.New(dashboard.Config{Control: c, Latency: lh, Events: dashboard.ControlEvents(c), Logger: log, RequireLogin: login})
	if err != nil {
		return nil, err
	}
	srv := httpserve.NewServer("dashboard", addr, withIdentity(h, iss), log)
	srv.DrainTimeout = dashboardDrainTimeout
	if err := srv.Listen(); err != nil {
		return nil, err
	}
	return &dashboardServer{srv: srv, latency: lh}, nil
}

// URL is the dashboard's address for people ("http://127.0.0.1:7072/").
func (d *dashboardServer) URL() string { return "http://" + d.srv.Addr() + "/" }

// Start serves the dashboard and samples its latency history until ctx
// ends, then drains the listener. Errors: the server's.
func (d *dashboardServer) Start(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return d.srv.Start(gctx) })
	g.Go(func() error { return d.latency.Start(gctx) })
	return g.Wait()
}
