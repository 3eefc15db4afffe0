// Command counter is the smallest stateful actor: an HTTP server whose only
// state is an in-memory counter, so a restored checkpoint is easy to tell
// from a cold boot (the count carries on instead of restarting at 1).
//
//	GET /         increments the counter, answers "count=N\n"
//	GET /healthz  answers "ok\n" without counting (the wakeup probe)
//
// Tests use more: streams and timing in stream.go (/sse, /ws, /sleep,
// /echo), a warm-up after restores in warmup.go (/ready, /warm), files in
// files.go. LISTEN_DELAY_MS delays listening at start. With
// ALLOW_UNLISTEN=1, POST /unlisten makes it stop listening while it runs
// on (see deafener).
//
// It listens on :$PORT (default 8080) and exits cleanly on SIGTERM/SIGINT.
// Build it static (CGO_ENABLED=0) so it runs on an empty rootfs.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
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
	wu, err := warmupFromEnv()
	if err != nil {
		return err
	}
	if wu != nil {
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		go wu.watch(wctx)
	}
	// LISTEN_DELAY_MS plays a runtime that loads its code before it
	// listens, so a TCP wakeup probe has something to wait for.
	delay, err := envMillis("LISTEN_DELAY_MS", 0)
	if err != nil {
		return err
	}
	time.Sleep(delay)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newHandler(wu, os.Getenv(testEndpointsEnv) == "1"), ReadHeaderTimeout: 10 * time.Second}
	var deaf *deafener
	if os.Getenv("ALLOW_UNLISTEN") == "1" {
		deaf = &deafener{srv: srv, ln: ln}
		mux := http.NewServeMux()
		mux.Handle("/", srv.Handler)
		deaf.register(mux)
		srv.Handler = mux
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	slog.Info("counter listening", "addr", addr)
	select {
	case err := <-errc:
		if deaf == nil || !deaf.deaf.Load() {
			return err
		}
		// POST /unlisten closed the listener: run on, deaf, until told
		// to stop.
		slog.Info("counter stopped listening")
		<-ctx.Done()
		slog.Info("counter stopped")
		return nil
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

// testEndpointsEnv set to 1 turns on the endpoints only tests may have:
// the file API (/files, /ask), /mint, /dial, /set-alarm, /log and
// /sleep. Anyone who reaches the actor through the router reaches them:
// they read and write any file in the sandbox (the identity files under
// /run/ate among them), mint the actor's identity tokens, probe what the
// sandbox can reach, spend its alarm budget, forge lines of its log and
// hold it busy; the demo `ate up --demo` runs has none.
const testEndpointsEnv = "COUNTER_TEST_ENDPOINTS"

// newHandler returns the counter's routes; each handler has its own count.
// wu may be nil (no warm-up after restores); testEndpoints adds those of
// testEndpointsEnv.
func newHandler(wu *warmup, testEndpoints bool) http.Handler {
	var count atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "count=%d\n", count.Add(1))
	})
	if testEndpoints {
		// POST /log prints the request body as one line on stdout, for
		// tests of `ate logs` (what an actor writes there is its log).
		mux.HandleFunc("POST /log", func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(io.LimitReader(r.Body, 4096))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Println(strings.TrimSpace(string(b)))
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprint(w, "logged\n")
		})
		registerFiles(mux)
		registerIdentity(mux)
		registerDial(mux)
		registerSleep(mux)
	}
	registerAlarms(mux, testEndpoints)
	registerStreams(mux)
	wu.register(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "ok\n")
	})
	return mux
}

// deafener makes the server stop listening while the process runs on, for
// tests of what clients see when nothing listens on an actor's port (the
// sandbox is up, connections to the port are refused). POST /unlisten
// does it; it is offered only with ALLOW_UNLISTEN=1, since an actor
// checkpointed afterwards can never pass its wakeup probe again.
type deafener struct {
	srv  *http.Server
	ln   net.Listener
	deaf atomic.Bool
}

func (d *deafener) register(mux *http.ServeMux) {
	mux.HandleFunc("POST /unlisten", func(w http.ResponseWriter, _ *http.Request) {
		d.deaf.Store(true)
		// Idle connections close now and this one after its answer
		// (Connection: close), so no client reuses one: every new
		// request must connect, and is refused.
		d.srv.SetKeepAlivesEnabled(false)
		_ = d.ln.Close()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "not listening any more\n")
	})
}

// warmupFromEnv reads WARMUP_MS and RESTORE_GAP_MS (see warmup); nil when
// WARMUP_MS is unset.
func warmupFromEnv() (*warmup, error) {
	d, err := envMillis("WARMUP_MS", 0)
	if err != nil || d == 0 {
		return nil, err
	}
	gap, err := envMillis("RESTORE_GAP_MS", time.Second)
	if err != nil {
		return nil, err
	}
	return newWarmup(d, gap), nil
}

func envMillis(k string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(k)
	if v == "" {
		return def, nil
	}
	ms, err := strconv.Atoi(v)
	if err != nil || ms < 0 {
		return 0, fmt.Errorf("%s=%q: want milliseconds", k, v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
