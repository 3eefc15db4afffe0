// Package httpserve serves an HTTP handler over cleartext HTTP/1.1 and
// HTTP/2 (h2c) until its context ends, then drains it: readiness first
// (/readyz answers 503 for a Drainer handler), a delay for load balancers,
// then in-flight requests, upgraded ones included, get a bounded time to
// finish. It also holds the copy-buffer pool every ReverseProxy hop
// shares. The router and the worker tunnel both serve through it.
package httpserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server timeouts.
const (
	// DefaultDrainTimeout bounds the end of a drain when DrainTimeout is
	// not set: it lets a router's request parked just before the drain
	// wait out its default park budget (30 s) and grace (10 s) and still
	// be answered (router.DefaultDrainTimeout is that sum).
	DefaultDrainTimeout = 40 * time.Second
	// drainPoll paces the wait for upgraded connections, which
	// http.Server.Shutdown does not track, at the end of a drain.
	drainPoll = 20 * time.Millisecond
	// readHeaderTimeout stops clients that open connections and never
	// finish a request header (slowloris). There is deliberately no write
	// or whole-request timeout: responses stream for as long as actors do.
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
)

// Drainer is implemented by handlers that take part in a drain
// (router.NewHandler's).
type Drainer interface {
	// Drain marks the handler as draining (/readyz answers 503).
	Drain()
	// InFlight counts requests being served, upgraded ones included.
	InFlight() int64
}

// Server serves a handler over cleartext HTTP/1.1 and HTTP/2 (h2c, prior
// knowledge) until its context ends, then drains. Use: NewServer,
// optionally Listen (to learn Addr before serving, e.g. for ":0"), then
// Start once. Its log lines carry server=<name>.
type Server struct {
	// DrainDelay is how long the server keeps serving after Start's
	// context ends, with its handler told to drain (if it is a Drainer),
	// so load balancers stop sending before the listener closes. Set
	// before Start. Default 0.
	DrainDelay time.Duration
	// DrainTimeout bounds the wait for in-flight requests (parked,
	// streaming, upgraded) once the listener is closed; connections still
	// open after it are cut. Set before Start. Default
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
	// TLS, if set, makes Listen accept TLS connections only (the worker
	// tunnel's mutual TLS, internal/pki): set before Listen. Its
	// NextProtos decide the protocol; ["http/1.1"] keeps upgrades.
	TLS *tls.Config

	name    string
	addr    string
	handler http.Handler
	logger  *slog.Logger

	mu sync.Mutex
	ln net.Listener // guarded by mu; set by Listen
}

// NewServer returns a Server named name (for logs and errors, e.g.
// "router") for handler on addr ("host:port"; port 0 picks a free one).
// A nil logger discards.
func NewServer(name, addr string, handler http.Handler, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{name: name, addr: addr, handler: handler,
		logger: logger.With("server", name)}
}

// Listen binds the server's address; Start then serves on it. Calling it
// again does nothing. The error wraps the listener's.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", s.name, s.addr, err)
	}
	if s.TLS != nil {
		ln = tls.NewListener(ln, s.TLS)
	}
	s.ln = ln
	return nil
}

// Addr returns the bound address ("127.0.0.1:41234"), or "" before Listen.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Start serves until ctx ends (listening first if Listen was not called),
// then drains: it tells the handler (if it is a Drainer), keeps serving
// for DrainDelay, stops accepting, waits up to DrainTimeout for in-flight
// requests, cuts what is left, and returns nil. It returns an error only
// when it cannot listen or serve (Listen's, or http.Server.Serve's
// wrapped).
func (s *Server) Start(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	// Requests derive from base, cancelled only after the drain: in-flight
	// requests finish undisturbed, then hijacked (upgraded) connections,
	// which Shutdown does not track, are told to end.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Protocols:         protocols,
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		// net/http's own complaints (bad requests, TLS probes, panics)
		// become structured lines too.
		ErrorLog:    slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return base },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	s.logger.Info("http server serving", "addr", ln.Addr().String())
	select {
	case err := <-served:
		return fmt.Errorf("%s: serve on %s: %w", s.name, ln.Addr(), err)
	case <-ctx.Done():
	}
	s.drain(srv)
	cancelBase()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: serve on %s: %w", s.name, ln.Addr(), err)
	}
	return nil
}

// drain runs the drain Start documents on srv.
func (s *Server) drain(srv *http.Server) {
	d, _ := s.handler.(Drainer)
	if d != nil {
		d.Drain()
	}
	timeout := s.DrainTimeout
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	s.logger.Info("http server draining", "delay", s.DrainDelay, "timeout", timeout)
	if s.DrainDelay > 0 {
		// Not a wait for anything in particular: the time endpoint
		// removal takes to reach every load balancer.
		time.Sleep(s.DrainDelay)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err == nil && d != nil {
		err = waitIdle(ctx, d)
	}
	if err != nil {
		// Long streams outlived the drain; cutting them is the intent.
		s.logger.Warn("http server drain timed out, closing connections", "timeout", timeout, "err", err)
		_ = srv.Close()
		return
	}
	s.logger.Info("http server drained")
}

// waitIdle waits until d has nothing in flight or ctx ends.
func waitIdle(ctx context.Context, d Drainer) error {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for d.InFlight() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d requests still in flight: %w", d.InFlight(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
