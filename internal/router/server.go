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
	// DefaultShutdownTimeout matches DefaultParkBudget, so requests parked
	// when shutdown begins can still be answered.
	DefaultShutdownTimeout = DefaultParkBudget
	// readHeaderTimeout stops clients that open connections and never
	// finish a request header (slowloris). There is deliberately no write
	// or whole-request timeout: responses stream for as long as actors do.
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
)

// Server serves a handler (normally NewHandler's, which also answers
// /healthz and /readyz for requests not addressed to an actor) over plain
// HTTP until its context ends. Use: NewServer, optionally Listen (to learn
// Addr before serving, e.g. for ":0"), then Start once.
type Server struct {
	// ShutdownTimeout bounds the graceful drain once Start's context ends;
	// connections still open after it are closed. Set before Start.
	// Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

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
	return &Server{ShutdownTimeout: DefaultShutdownTimeout, addr: addr, handler: handler, logger: logger}
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

// Start serves until ctx ends (listening first if Listen was not called),
// then stops accepting, waits up to ShutdownTimeout for in-flight requests,
// closes what is left, and returns nil. It returns an error only when it
// cannot listen or serve.
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
	srv := &http.Server{
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
	s.shutdown(srv)
	cancelBase()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("router: serve on %s: %w", ln.Addr(), err)
	}
	return nil
}

// shutdown drains srv for up to ShutdownTimeout, then closes it.
func (s *Server) shutdown(srv *http.Server) {
	timeout := s.ShutdownTimeout
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		// Long streams outlived the drain; cutting them is the intent.
		s.logger.Warn("router drain timed out, closing connections", "timeout", timeout, "err", err)
		_ = srv.Close()
	}
}
