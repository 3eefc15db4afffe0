// Command counter is the smallest stateful actor: an HTTP server whose only
// state is an in-memory counter, so a restored checkpoint is easy to tell
// from a cold boot (the count carries on instead of restarting at 1).
//
//	GET /         increments the counter, answers "count=N\n"
//	GET /healthz  answers "ok\n" without counting (the wakeup probe)
//
// It listens on :$PORT (default 8080) and exits cleanly on SIGTERM/SIGINT.
// Build it static (CGO_ENABLED=0) so it runs on an empty rootfs.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// shutdownGrace bounds how long in-flight requests may finish after
// SIGTERM; requests here take microseconds, so this is only a backstop.
const shutdownGrace = 5 * time.Second

func main() {
	addr := ":" + envOr("PORT", "8080")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, addr); err != nil {
		slog.Error("counter failed", "err", err)
		os.Exit(1)
	}
}

// run serves on addr until ctx ends, then shuts down gracefully.
func run(ctx context.Context, addr string) error {
	srv := &http.Server{Addr: addr, Handler: newHandler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	slog.Info("counter listening", "addr", addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	slog.Info("counter stopped")
	return nil
}

// newHandler returns the counter's routes; each handler has its own count.
func newHandler() http.Handler {
	var count atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "count=%d\n", count.Add(1))
	})
	registerFiles(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "ok\n")
	})
	return mux
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
