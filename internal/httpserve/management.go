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

// Management is a component's management listener: /healthz, /readyz
// and /metrics (Prometheus text exposition), or (NewPprof) a loopback
// listener of /debug/pprof/. It has no drain: nothing balances load to
// it.
type Management struct {
	ln  net.Listener
	srv *http.Server
}

// NewManagement listens on addr ("host:port", port 0 picks one) for
// metrics gathered from g, and answers /healthz (200 while the
// process serves) and /readyz (200 once ready returns nil, else 503 with
// "not ready: " and its error; nil ready is always ready). It serves no
// pprof: orchestrators and scrapers reach this port (NewPprof). Errors:
// the listen.
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
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen: %w", err)
	}
	return &Management{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout}}, nil
}

// ErrNotLoopback is NewPprof's refusal of an address other hosts (or
// other Pods) could reach.
var ErrNotLoopback = errors.New("not a loopback address")

// NewPprof listens on addr for net/http/pprof's /debug/pprof/. pprof has
// no authentication and shows the process's memory (heap profiles hold
// strings), so addr must be loopback: 127.0.0.1:port, [::1]:port or
// localhost:port, checked on the address actually bound (":6060" binds
// every interface and is refused). Reach it from elsewhere through an
// authenticated hop (ssh -L, kubectl port-forward). /debug/pprof/cmdline
// is never served: a command line may hold a secret someone passed
// despite --store-file. Errors wrap ErrNotLoopback, or the listen's.
func NewPprof(addr string) (*Management, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof listen: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		_ = ln.Close()
		return nil, fmt.Errorf("pprof listen %s: %w (pprof is unauthenticated: give 127.0.0.1:port and reach it through ssh -L or kubectl port-forward)", addr, ErrNotLoopback)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/cmdline", http.NotFound)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
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

// StartPprof serves NewPprof(addr) until ctx ends or stop is called
// (which waits for it); an empty addr serves nothing. Errors: NewPprof's.
func StartPprof(ctx context.Context, addr string) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	p, err := NewPprof(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Serve(ctx)
	}()
	return func() { cancel(); <-done }, nil
}
