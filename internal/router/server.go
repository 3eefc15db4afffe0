package router

import (
	"context"
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
	// DefaultDrainTimeout lets a request parked just before the drain
	// began wait out its budget and grace and still be answered.
	DefaultDrainTimeout = DefaultParkBudget + DefaultParkGrace
	// drainPoll paces the wait for upgraded connections, which
	// http.Server.Shutdown does not track, at the end of a drain.
	drainPoll = 20 * time.Millisecond
	// readHeaderTimeout stops clients that open connections and never
	// finish a request header (slowloris). There is deliberately no write
	// or whole-request timeout: responses stream for as long as actors do.
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
)

// Server serves a handler (normally NewHandler's, which also answers
// /healthz and /readyz for requests not addressed to an actor) over
// cleartext HTTP/1.1 and HTTP/2 (h2c, prior knowledge) until its context
// ends, then drains. Use: NewServer, optionally Listen (to learn Addr
// before serving, e.g. for ":0"), then Start once.
type Server struct {
	// DrainDelay is how long the server keeps serving after Start's
	// context ends, with its handler told to drain (/readyz answers 503),
	// so load balancers stop sending before the listener closes. Set
	// before Start. Default 0.
	DrainDelay time.Duration
	// DrainTimeout bounds the wait for in-flight requests (parked,
	// streaming, upgraded) once the listener is closed; connections still
	// open after it are cut. Set before Start. Default
	// DefaultDrainTimeout.
	DrainTimeout time.Duration

	addr    string
	handler http.Handler
	logger  *slog.Logger

	mu sync.Mutex
	ln net.Listener // guarded by mu; set by Listen
}

// NewServer returns a Server for handler on addr ("host:port"; port 0
// picks a free one). A nil logger discards.
func NewServer(addr string, handler http.Handler, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{DrainTimeout: DefaultDrainTimeout, addr: addr, handler: handler, logger: logger}
}

// Listen binds the server's address; Start then serves on it. Calling it
// again does nothing.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("router: listen on %s: %w", s.addr, err)
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

// drainer is implemented by handlers that take part in a drain
// (NewHandler's).
type drainer interface {
	// Drain marks the handler as draining (/readyz answers 503).
	Drain()
	// InFlight counts requests being served, upgraded ones included.
	InFlight() int64
}

// Start serves until ctx ends (listening first if Listen was not called),
// then drains: it tells the handler (if it is a drainer), keeps serving
// for DrainDelay, stops accepting, waits up to DrainTimeout for in-flight
// requests, cuts what is left, and returns nil. It returns an error only
// when it cannot listen or serve.
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
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	s.logger.Info("router serving", "addr", ln.Addr().String())
	select {
	case err := <-served:
		return fmt.Errorf("router: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.drain(srv)
	cancelBase()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("router: serve on %s: %w", ln.Addr(), err)
	}
	return nil
}

// drain runs the drain Start documents on srv.
func (s *Server) drain(srv *http.Server) {
	d, _ := s.handler.(drainer)
	if d != nil {
		d.Drain()
	}
	timeout := s.DrainTimeout
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	s.logger.Info("router draining", "delay", s.DrainDelay, "timeout", timeout)
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
		s.logger.Warn("router drain timed out, closing connections", "timeout", timeout, "err", err)
		_ = srv.Close()
		return
	}
	s.logger.Info("router drained")
}

// waitIdle waits until d has nothing in flight or ctx ends.
func waitIdle(ctx context.Context, d drainer) error {
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
