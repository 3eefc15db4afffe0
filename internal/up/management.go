package up

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"substrate.dev/ate/internal/metrics"
)

// managementServer is the management listener: /metrics (Prometheus
// text exposition of ms and the Go runtime) and /debug/pprof/
// (net/http/pprof). It has no drain: nothing balances load to it.
type managementServer struct {
	ln  net.Listener
	srv *http.Server
}

// newManagementServer listens on addr for ms's metrics and pprof, and
// answers /healthz (200 while the process serves) and /readyz (200 once
// ready says so, else 503 with its reason; nil ready is always ready).
func newManagementServer(addr string, ms *metrics.Metrics, ready func() error) (*managementServer, error) {
	reg, err := metrics.NewRegistry(ms)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil {
			if err := ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen: %w", err)
	}
	// No WriteTimeout: a CPU profile or trace streams for as long as
	// its ?seconds= asks.
	return &managementServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

func (m *managementServer) addr() string { return m.ln.Addr().String() }

// serve serves until ctx ends, then closes the listener and its
// connections (a profile being taken is cut).
func (m *managementServer) serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- m.srv.Serve(m.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics server: %w", err)
	case <-ctx.Done():
		_ = m.srv.Close()
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics server: %w", err)
		}
		return nil
	}
}

// close releases the listener if serve never ran.
func (m *managementServer) close() { _ = m.ln.Close() }
