package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Management is a component's management listener: /healthz, /readyz,
// /metrics (Prometheus text exposition) and /debug/pprof/
// (net/http/pprof). It has no drain: nothing balances load to it.
type Management struct {
	ln  net.Listener
	srv *http.Server
}

// NewManagement listens on addr ("host:port", port 0 picks one) for
// metrics gathered from g and pprof, and answers /healthz (200 while the
// process serves) and /readyz (200 once ready returns nil, else 503 with
// "not ready: " and its error; nil ready is always ready). Errors: the
// listen.
func NewManagement(addr string, g prometheus.Gatherer, ready func() error) (*Management, error) {
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
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
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
	return &Management{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout}}, nil
}

// Addr is the address listened on.
func (m *Management) Addr() string { return m.ln.Addr().String() }

// Serve serves until ctx ends, then closes the listener and its
// connections (a profile being taken is cut). Errors: the server's.
func (m *Management) Serve(ctx context.Context) error {
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

// Close releases the listener if Serve never ran.
func (m *Management) Close() { _ = m.ln.Close() }
