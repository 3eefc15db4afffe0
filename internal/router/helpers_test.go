package router

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/testwait"
	"substrate.dev/ate/internal/tunnelproto"
)

// fakeResolver stands in for the Control API. A nil lookup reports every
// actor as not running; a nil resume fails the test; a nil assigned says
// no worker is assigned. Every Resume that succeeds reports resumption.
type fakeResolver struct {
	t          *testing.T
	lookup     func(ctx context.Context, key names.ActorKey) (Target, bool, error)
	resume     func(ctx context.Context, key names.ActorKey) (Target, error)
	assigned   func(ctx context.Context, key names.ActorKey) (bool, error)
	resumption Resumption
	lookups    atomic.Int64
	resumes    atomic.Int64
}

var _ Resolver = (*fakeResolver)(nil)

func (f *fakeResolver) Lookup(ctx context.Context, key names.ActorKey) (Target, bool, error) {
	f.lookups.Add(1)
	if f.lookup == nil {
		return Target{}, false, nil
	}
	return f.lookup(ctx, key)
}

func (f *fakeResolver) Resume(ctx context.Context, key names.ActorKey) (Target, Resumption, error) {
	f.resumes.Add(1)
	if f.resume == nil {
		f.t.Errorf("unexpected Resume(%s)", key)
		return Target{}, Resumption{}, fmt.Errorf("unexpected resume")
	}
	t, err := f.resume(ctx, key)
	if err != nil {
		return Target{}, Resumption{}, err
	}
	return t, f.resumption, nil
}

func (f *fakeResolver) Assigned(ctx context.Context, key names.ActorKey) (bool, error) {
	if f.assigned == nil {
		return false, nil
	}
	return f.assigned(ctx, key)
}

// targetAt is the target the fakes hand out for key on a tunnel at addr.
func targetAt(key names.ActorKey, worker, addr string) Target {
	return Target{Actor: key, UID: "uid-" + key.String(), Worker: worker, TunnelAddr: addr, Assignment: "5"}
}

// misdirectedTunnel starts a tunnel that answers every request 421, as
// one whose worker no longer hosts the actor, and returns its host:port.
func misdirectedTunnel(t *testing.T) string {
	return newTunnel(t, func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "actor not here", http.StatusMisdirectedRequest)
	})
}

// newTunnel starts a backend standing in for a worker tunnel and returns
// its host:port.
func newTunnel(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// echoTunnel answers 200 with one line describing what it received:
// "<name> host=<Host> worker=<Ate-Worker values> uid=<Ate-Actor-Uid values> uri=<RequestURI> xff=<set?>".
// hits counts its requests.
func echoTunnel(t *testing.T, name string, hits *atomic.Int64) string {
	return newTunnel(t, func(w http.ResponseWriter, r *http.Request) {
		if hits != nil {
			hits.Add(1)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%s host=%s worker=%s uid=%s uri=%s xff=%t assignment=%s\n", name, r.Host,
			strings.Join(r.Header.Values(tunnelproto.HeaderWorker), ","),
			strings.Join(r.Header.Values(tunnelproto.HeaderActorUID), ","),
			r.RequestURI, r.Header.Get("X-Forwarded-For") != "",
			strings.Join(r.Header.Values(tunnelproto.HeaderAssignment), ","))
	})
}

// deadAddr returns a local address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// newRouter serves NewHandler(cfg, res) on a test server and returns it
// with the handler, whose internals tests observe.
func newRouter(t *testing.T, cfg Config, res Resolver) (*httptest.Server, *Handler) {
	t.Helper()
	return newRouterLogging(t, cfg, res, nil)
}

// newRouterLogging is newRouter with the handler logging to logger.
func newRouterLogging(t *testing.T, cfg Config, res Resolver, logger *slog.Logger) (*httptest.Server, *Handler) {
	t.Helper()
	tr := NewTunnelTransport()
	if cfg.Transport == nil {
		cfg.Transport = tr
	}
	h := NewHandler(cfg, res, logger)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	return srv, h
}

// reply is a response read to the end.
type reply struct {
	status int
	body   string
	// msg is body without the " (request id …)" that ends a failure's
	// line, when that id is the response's HeaderRequestID; otherwise
	// body.
	msg        string
	activation string
	retryAfter string
	header     http.Header
	err        error
}

// send issues req on srv's client and reads the whole answer.
func send(srv *httptest.Server, req *http.Request) reply {
	resp, err := srv.Client().Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	body := string(b)
	msg := body
	if m, ok := strings.CutSuffix(body, " (request id "+resp.Header.Get(HeaderRequestID)+")\n"); ok {
		msg = m + "\n"
	}
	return reply{status: resp.StatusCode, body: body, msg: msg, err: err, header: resp.Header,
		activation: resp.Header.Get(HeaderActivation), retryAfter: resp.Header.Get("Retry-After")}
}

// get sends a GET for path with the given Host and headers.
func get(t *testing.T, srv *httptest.Server, host, path string, hdr map[string]string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return send(srv, req)
}

// warmResolver reports every actor RUNNING on the tunnel at addr, with
// policy p.
func warmResolver(t *testing.T, addr string, p Policy) *fakeResolver {
	return &fakeResolver{t: t, lookup: func(_ context.Context, key names.ActorKey) (Target, bool, error) {
		tg := targetAt(key, "w1", addr)
		tg.Policy = p
		return tg, true, nil
	}}
}

// openStream GETs path of actor default/app through srv and returns its
// response body to read as it streams; the request gives up after 10 s,
// so a proxy that buffers fails the test instead of hanging it.
func openStream(t *testing.T, srv *httptest.Server, path string) *bufio.Reader {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "app.default.actors.localhost"
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return bufio.NewReader(resp.Body)
}

// controlError forges what ControlResolver returns when the API answers a
// status with code (its name, e.g. "Unavailable") and msg: the router's
// errors (fromControl), then the status's own text. The router's core
// knows no gRPC, so neither do its tests' fakes.
func controlError(code, msg string, errs ...error) error {
	err := fmt.Errorf("rpc error: code = %s desc = %s", code, msg)
	for i := len(errs) - 1; i >= 0; i-- {
		err = fmt.Errorf("%w: %w", errs[i], err)
	}
	return err
}

// contextError forges what ControlResolver returns for a call whose
// context ended (grpc-go reports that as a status too).
func contextError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return controlError("DeadlineExceeded", ctx.Err().Error(), ErrNoCapacity, context.DeadlineExceeded)
	}
	return controlError("Canceled", ctx.Err().Error(), context.Canceled)
}

// coldBurst sends n requests for app.default at once, waits until all of
// them have joined the one shared resolution (held by the test until
// release is closed), releases it and returns every reply.
func coldBurst(t *testing.T, srv *httptest.Server, h *Handler, n int, release chan struct{}) []reply {
	t.Helper()
	replies := make(chan reply, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { replies <- get(t, srv, "app.default.actors.localhost", "/", nil) })
	}
	testwait.Until(t, "all requests to join the shared resolution", func() bool { return h.act.flights.Waiting() == int64(n) })
	close(release)
	wg.Wait()
	close(replies)
	var out []reply
	for r := range replies {
		out = append(out, r)
	}
	return out
}

// resumeOnRelease is a fakeResolver resume that answers with a target on
// worker at addr once release is closed, or fails when its context ends.
func resumeOnRelease(release <-chan struct{}, worker, addr string) func(context.Context, names.ActorKey) (Target, error) {
	return func(ctx context.Context, key names.ActorKey) (Target, error) {
		select {
		case <-release:
			return targetAt(key, worker, addr), nil
		case <-ctx.Done():
			return Target{}, ctx.Err()
		}
	}
}
