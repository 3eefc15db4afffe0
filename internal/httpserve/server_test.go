package httpserve_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/httpserve/servetest"
	"substrate.dev/ate/internal/testlog"
	"substrate.dev/ate/internal/testwait"
)

// startServer serves h on a free local port, with DrainDelay delay, until
// the returned stop is called; stop returns Start's error.
func startServer(t *testing.T, h http.Handler, delay time.Duration, logger *slog.Logger) (s *httpserve.Server, stop func() error) {
	t.Helper()
	s = httpserve.NewServer("test", "127.0.0.1:0", h, logger)
	// A test that leaves a request hanging fails fast instead of waiting
	// out the default drain.
	s.DrainDelay, s.DrainTimeout = delay, 5*time.Second
	return s, servetest.Run(t, s)
}

func get(ctx context.Context, client *http.Client, addr, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestServerDrainsInFlightRequests: a request in flight when the context
// ends is answered before Start returns.
func TestServerDrainsInFlightRequests(t *testing.T) {
	arrived, finish := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(arrived)
		<-finish
		_, _ = io.WriteString(w, "done\n")
	})
	s, stop := startServer(t, h, 0, nil)
	client := newClient(t)

	type result struct {
		status int
		body   string
		err    error
	}
	answered := make(chan result, 1)
	go func() {
		code, body, err := get(t.Context(), client, s.Addr(), "/slow")
		answered <- result{code, body, err}
	}()
	<-arrived
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// The listener closing shows the drain has begun.
	testwait.Until(t, "the listener to close", func() bool {
		c, err := net.Dial("tcp", s.Addr())
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	})
	close(finish)
	if r := <-answered; r.err != nil || r.status != 200 || r.body != "done\n" {
		t.Errorf("in-flight request: %d %q %v, want 200 done", r.status, r.body, r.err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Start returned %v", err)
	}
}

// drainHandler is a Drainer that answers /readyz like the router's.
type drainHandler struct {
	draining atomic.Bool
	inflight atomic.Int64
}

func (d *drainHandler) Drain()          { d.draining.Store(true) }
func (d *drainHandler) InFlight() int64 { return d.inflight.Load() }
func (d *drainHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if d.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
}

// TestServerTellsDrainerAndLogs: a Drainer handler is told before the
// delay, a handler still counting a request in flight after Shutdown is
// waited for, and every log line is JSON naming the server.
func TestServerTellsDrainerAndLogs(t *testing.T) {
	var buf testlog.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	d := &drainHandler{}
	s, stop := startServer(t, d, 200*time.Millisecond, logger)
	client := newClient(t)
	// As if a hijacked connection were still open: Shutdown does not
	// track it, InFlight does.
	d.inflight.Add(1)
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	testwait.Until(t, "the drainer to be told", d.draining.Load)
	if code, _, err := get(t.Context(), client, s.Addr(), "/readyz"); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("during the delay: %d %v, want 503", code, err)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Start returned %v with a request in flight", err)
	case <-time.After(300 * time.Millisecond):
	}
	d.inflight.Add(-1)
	if err := <-stopped; err != nil {
		t.Fatalf("Start returned %v", err)
	}

	var msgs []string
	for line := range strings.Lines(buf.String()) {
		var rec struct{ Msg, Server string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec.Server != "test" {
			t.Errorf("log line %q lacks server=test", line)
		}
		msgs = append(msgs, rec.Msg)
	}
	want := []string{"http server serving", "http server draining", "http server drained"}
	if strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Errorf("log messages %q, want %q", msgs, want)
	}
}
