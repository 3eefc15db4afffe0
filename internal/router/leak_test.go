package router

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/testwait"
	"substrate.dev/ate/internal/tunnelproto"
)

// leakyCause is what the layers below the router say when an actor
// fails: interior addresses, namespace, runtime and file names.
const leakyCause = "resume failed: gvisor: dial 169.254.17.2:9090 in ate123-w1: netns: /var/lib/ate/node/workers/ate123-w1/ns: " +
	"runsc --root /run/ate/ate123 restore: exit status 1"

// leaks are what no answer of the router may contain, in its body or any
// header name or value (matched case-insensitively): interior addresses,
// namespace and worker names, paths, and the names of internal components
// and of gRPC codes.
var leaks = []string{
	"169.254.", "127.0.0.1", "-w1", "netns", "gvisor", "runsc", "/var", "/run", "rpc error", "desc =",
	"tunnel", "unavailable", "failedprecondition", "resourceexhausted", "invalidargument", "internal", "notfound",
	"exit status",
}

// logBuffer collects a handler's JSON log records; safe for concurrent
// use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the records whose request_id is rid.
func (b *logBuffer) records(t *testing.T, rid string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(b.buf.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["request_id"] == rid {
			out = append(out, rec)
		}
	}
	return out
}

// tunnelAnswering starts a stand-in for the worker tunnel that answers
// every request as the tunnel does when the actor gave no answer (marker
// kind), but with the old tunnel's body — the cause itself — and an extra
// header full of internals: the router must replace the whole answer.
func tunnelAnswering(t *testing.T, kind tunnelproto.ErrorKind, code int) string {
	return newTunnel(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(tunnelproto.HeaderError, string(kind))
		w.Header().Set("X-Debug", "/run/ate/ate123-w1")
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		http.Error(w, "actor did not answer: "+leakyCause, code)
	})
}

// resettingTunnel starts a stand-in for a tunnel whose connection is
// reset (the node died mid-request) before it answers.
func resettingTunnel(t *testing.T) string {
	return newTunnel(t, func(w http.ResponseWriter, _ *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST
		}
		_ = c.Close()
	})
}

// hangingTunnel starts a stand-in for a tunnel whose actor never answers.
func hangingTunnel(t *testing.T) string {
	return newTunnel(t, func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
}

// failingResume is a resolver whose actors are not running and whose
// resumes fail with err.
func failingResume(t *testing.T, err error) *fakeResolver {
	return &fakeResolver{t: t, resume: func(context.Context, names.ActorKey) (Target, error) { return Target{}, err }}
}

var hexID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestFailuresLeakNothing: for every way a request can fail, the client's
// answer names the actor and what to do, ends with the request id that
// is also its Ate-Request-Id header, and contains no internals in body or
// headers; the router logs the failure once, with that id and the full
// cause.
func TestFailuresLeakNothing(t *testing.T) {
	leaky := func(code string, errs ...error) error { return controlError(code, leakyCause, errs...) }
	releaseParked := make(chan struct{})
	tests := []struct {
		name string
		cfg  Config
		// res builds the resolver; park, when set, occupies the router
		// before the request and returns what ends that.
		res        func(t *testing.T) Resolver
		park       func(t *testing.T, srv *httptest.Server, h *Handler) (release func())
		wantStatus int
		wantRetry  bool
		wantBody   string
		// wantCause are parts of the logged err.
		wantCause []string
	}{
		{name: "port refused", res: func(t *testing.T) Resolver {
			return warmResolver(t, tunnelAnswering(t, tunnelproto.KindRefused, http.StatusBadGateway), Policy{})
		}, wantStatus: 502, wantBody: "actor default/app is not listening on its port, or has just stopped; check that it listens",
			wantCause: []string{"proxy to worker w1", tunnelproto.HeaderError, `"refused"`}},
		{name: "upstream broke", res: func(t *testing.T) Resolver {
			return warmResolver(t, tunnelAnswering(t, tunnelproto.KindUpstream, http.StatusBadGateway), Policy{})
		}, wantStatus: 502, wantBody: "actor default/app did not answer on its port; check that it listens and stays up",
			wantCause: []string{"proxy to worker w1", `"upstream"`}},
		{name: "sandbox gone: tunnel cut the request", res: func(t *testing.T) Resolver {
			return warmResolver(t, tunnelAnswering(t, tunnelproto.KindCut, http.StatusServiceUnavailable), Policy{})
		}, wantStatus: 503, wantRetry: true, wantBody: "actor default/app is being suspended or has stopped; retry",
			wantCause: []string{"proxy to worker w1", `"cut"`}},
		{name: "sandbox gone: tunnel connection reset", res: func(t *testing.T) Resolver {
			return warmResolver(t, resettingTunnel(t), Policy{})
		}, wantStatus: 502, wantBody: "actor default/app is unreachable; retry later",
			wantCause: []string{"proxy to worker w1", "127.0.0.1:"}},
		{name: "tunnel gone, actor not recovered elsewhere", cfg: Config{ParkBudget: 200 * time.Millisecond}, res: func(t *testing.T) Resolver {
			return warmResolver(t, deadAddr(t), Policy{})
		}, wantStatus: 503, wantRetry: true,
			wantBody:  "actor default/app is on a node that cannot be reached and was not recovered elsewhere within the park budget of 200ms; retry later",
			wantCause: []string{"park budget exhausted", "the actor's node is unreachable", "worker w1 at tunnel 127.0.0.1:", "connection refused"}},
		{name: "restore failed", res: func(t *testing.T) Resolver {
			return failingResume(t, leaky("Unavailable", ErrResumeFailed))
		}, wantStatus: 502, wantBody: "actor default/app could not be resumed; its last snapshot is kept and the next request tries again",
			wantCause: []string{leakyCause, "Unavailable"}},
		{name: "being deleted", res: func(t *testing.T) Resolver {
			return failingResume(t, leaky("FailedPrecondition", ErrNotResumable))
		}, wantStatus: 409, wantBody: "actor default/app cannot be resumed now (it is being deleted or changed); retry later",
			wantCause: []string{leakyCause, "FailedPrecondition"}},
		{name: "control plane refuses the request", res: func(t *testing.T) Resolver {
			return failingResume(t, leaky("InvalidArgument", ErrInvalid))
		}, wantStatus: 400, wantBody: "invalid request for actor default/app; check its name",
			wantCause: []string{leakyCause, "InvalidArgument"}},
		{name: "control plane fails otherwise", res: func(t *testing.T) Resolver {
			return failingResume(t, leaky("Internal", ErrControlPlane))
		}, wantStatus: 502, wantBody: "actor default/app could not be resumed; retry later",
			wantCause: []string{leakyCause, "Internal"}},
		{name: "route timeout", res: func(t *testing.T) Resolver {
			return warmResolver(t, hangingTunnel(t), Policy{RouteTimeout: 50 * time.Millisecond})
		}, wantStatus: 504, wantBody: "actor default/app did not answer within its route timeout of 50ms",
			wantCause: []string{"route timeout of 50ms", "request delivered: true"}},
		{name: "park budget", cfg: Config{ParkBudget: 50 * time.Millisecond}, res: func(t *testing.T) Resolver {
			return failingResume(t, leaky("ResourceExhausted", ErrNoCapacity))
		}, wantStatus: 503, wantRetry: true,
			wantBody:  "park budget of 50ms exhausted: actor default/app was not resumed in time; retry later",
			wantCause: []string{"park budget exhausted", leakyCause}},
		{name: "not found", res: func(t *testing.T) Resolver {
			return &fakeResolver{t: t, lookup: func(context.Context, names.ActorKey) (Target, bool, error) {
				return Target{}, false, leaky("NotFound", ErrActorNotFound)
			}}
		}, wantStatus: 404, wantBody: "actor default/app not found", wantCause: []string{leakyCause, "NotFound"}},
		{name: "park full", cfg: Config{ParkMax: 1}, res: func(t *testing.T) Resolver {
			return &fakeResolver{t: t, resume: func(ctx context.Context, _ names.ActorKey) (Target, error) {
				// Holds the only parking slot until released.
				select {
				case <-releaseParked:
					return Target{}, controlError("Unavailable", "released", ErrResumeFailed)
				case <-ctx.Done():
					return Target{}, ctx.Err()
				}
			}}
		}, park: func(t *testing.T, srv *httptest.Server, h *Handler) func() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/", nil)
				req.Host = "other.default.actors.localhost"
				if resp, err := srv.Client().Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			testwait.Until(t, "a parked request", func() bool { return h.act.parked.Load() == 1 })
			return func() {
				close(releaseParked)
				<-done
			}
		}, wantStatus: 503, wantRetry: true,
			wantBody:  "parking lot full: too many requests are waiting for actors to resume (limit 1); retry shortly",
			wantCause: []string{"park request for default/app", "too many parked requests"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &logBuffer{}
			logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			srv, h := newRouterLogging(t, tt.cfg, tt.res(t), logger)
			if tt.park != nil {
				defer tt.park(t, srv, h)()
			}
			got := get(t, srv, "app.default.actors.localhost", "/", nil)
			if got.err != nil {
				t.Fatal(got.err)
			}
			rid := got.header.Get(HeaderRequestID)
			if !hexID.MatchString(rid) {
				// Not fatal: the leaks are worth seeing too.
				t.Errorf("%s = %q, want a fresh id of 32 hex digits", HeaderRequestID, rid)
			}
			if want := tt.wantBody + " (request id " + rid + ")\n"; got.status != tt.wantStatus || got.body != want {
				t.Errorf("got %d %q, want %d %q", got.status, got.body, tt.wantStatus, want)
			}
			if (got.retryAfter == "1") != tt.wantRetry {
				t.Errorf("Retry-After %q, want it set: %t", got.retryAfter, tt.wantRetry)
			}
			assertNoLeaks(t, got.body, got.header)

			var failures []map[string]any
			for _, rec := range logs.records(t, rid) {
				switch rec["msg"] {
				case "request failed", "request refused":
					failures = append(failures, rec)
				}
			}
			if len(failures) != 1 {
				t.Fatalf("%d failure records with request_id %s, want 1; log:\n%s", len(failures), rid, logs.buf.String())
			}
			rec := failures[0]
			wantLevel := "WARN"
			if tt.wantStatus == 400 || tt.wantStatus == 404 {
				wantLevel = "INFO"
			}
			actor, _ := rec["actor"].(map[string]any)
			if rec["level"] != wantLevel || rec["status"] != float64(tt.wantStatus) || actor["name"] != "app" || actor["atespace"] != "default" {
				t.Errorf("failure record %v, want level %s, status %d, actor app in default", rec, wantLevel, tt.wantStatus)
			}
			cause, _ := rec["err"].(string)
			for _, want := range tt.wantCause {
				if !strings.Contains(cause, want) {
					t.Errorf("logged cause %q lacks %q", cause, want)
				}
			}
		})
	}
}

// assertNoLeaks fails the test if body or a header names anything of
// leaks.
func assertNoLeaks(t *testing.T, body string, hdr http.Header) {
	t.Helper()
	check := func(where, s string) {
		for _, leak := range leaks {
			if strings.Contains(strings.ToLower(s), leak) {
				t.Errorf("%s %q contains %q", where, s, leak)
			}
		}
	}
	check("body", body)
	for k, vs := range hdr {
		check("header name", k)
		for _, v := range vs {
			check("header "+k, v)
		}
	}
}

// TestRequestID: every response carries one Ate-Request-Id, the client's
// X-Request-Id when it is a sane token, else a fresh one; the actor gets
// the same id as X-Request-Id, and an id the actor sends itself is
// replaced.
func TestRequestID(t *testing.T) {
	tunnel := newTunnel(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hints" {
			// A 1xx relayed first clears the router's response header.
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		}
		w.Header().Set(HeaderRequestID, "forged-by-the-actor")
		_, _ = io.WriteString(w, "seen "+strings.Join(r.Header.Values(headerXRequestID), ","))
	})
	srv, _ := newRouter(t, Config{}, warmResolver(t, tunnel, Policy{}))
	tests := []struct {
		name, host, path, incoming string
		// wantReused: the answer's id is incoming; else a fresh one.
		wantReused bool
		wantStatus int
	}{
		{name: "fresh", host: "app.default.actors.localhost", path: "/", wantStatus: 200},
		{name: "sane id reused", host: "app.default.actors.localhost", path: "/", incoming: "Req-1.2_3", wantReused: true, wantStatus: 200},
		{name: "64 characters reused", host: "app.default.actors.localhost", path: "/", incoming: strings.Repeat("a", 64), wantReused: true, wantStatus: 200},
		{name: "65 characters replaced", host: "app.default.actors.localhost", path: "/", incoming: strings.Repeat("a", 65), wantStatus: 200},
		{name: "space replaced", host: "app.default.actors.localhost", path: "/", incoming: "a b", wantStatus: 200},
		{name: "injection replaced", host: "app.default.actors.localhost", path: "/", incoming: `x") ok (`, wantStatus: 200},
		{name: "after a 1xx", host: "app.default.actors.localhost", path: "/hints", incoming: "hinted", wantReused: true, wantStatus: 200},
		{name: "health", host: "localhost", path: "/healthz", incoming: "probe-7", wantReused: true, wantStatus: 200},
		{name: "no actor", host: "localhost", path: "/", incoming: "lost-1", wantReused: true, wantStatus: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tt.incoming != "" {
				hdr[headerXRequestID] = tt.incoming
			}
			got := get(t, srv, tt.host, tt.path, hdr)
			if got.err != nil || got.status != tt.wantStatus {
				t.Fatalf("got %d %q %v, want %d", got.status, got.body, got.err, tt.wantStatus)
			}
			ids := got.header.Values(HeaderRequestID)
			if len(ids) != 1 {
				t.Fatalf("%s = %q, want one value", HeaderRequestID, ids)
			}
			if tt.wantReused && ids[0] != tt.incoming || !tt.wantReused && !hexID.MatchString(ids[0]) {
				t.Fatalf("%s = %q, want reused %t of %q", HeaderRequestID, ids[0], tt.wantReused, tt.incoming)
			}
			switch {
			case strings.HasPrefix(got.body, "seen "):
				if got.body != "seen "+ids[0] {
					t.Errorf("actor got %s %q, want %q", headerXRequestID, got.body, "seen "+ids[0])
				}
			case tt.wantStatus != 200:
				if !strings.HasSuffix(got.body, " (request id "+ids[0]+")\n") {
					t.Errorf("failure body %q does not end with the request id", got.body)
				}
			}
		})
	}
}

// TestActorAnswersPassThrough: errors the actor's app answers itself —
// status, headers and body, internals and all, since they are the app's
// — reach the client untouched; only the router's header is added.
func TestActorAnswersPassThrough(t *testing.T) {
	tests := []struct {
		name   string
		status int
		header http.Header
		body   string
	}{
		{"502 from the app", http.StatusBadGateway, http.Header{"X-App": {"1"}}, "upstream of the app at 10.1.2.3 failed\n"},
		{"503 from the app with its own Retry-After", http.StatusServiceUnavailable, http.Header{"Retry-After": {"7"}}, "app warming up\n"},
		{"500 from the app", http.StatusInternalServerError, nil, "panic in /srv/app/main.go\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tunnel := newTunnel(t, func(w http.ResponseWriter, _ *http.Request) {
				for k, vs := range tt.header {
					w.Header()[k] = vs
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			srv, _ := newRouter(t, Config{}, warmResolver(t, tunnel, Policy{}))
			got := get(t, srv, "app.default.actors.localhost", "/", nil)
			if got.status != tt.status || got.body != tt.body || got.activation != "warm" {
				t.Errorf("got %d %q activation %q, want the app's %d %q", got.status, got.body, got.activation, tt.status, tt.body)
			}
			for k, vs := range tt.header {
				if g := got.header.Values(k); !slices.Equal(g, vs) {
					t.Errorf("header %s = %q, want the app's %q", k, g, vs)
				}
			}
			if !hexID.MatchString(got.header.Get(HeaderRequestID)) {
				t.Errorf("%s = %q", HeaderRequestID, got.header.Get(HeaderRequestID))
			}
		})
	}
}

// TestTunnelErrorTarget: after the tunnel says the actor's app did not
// answer, the actor is still where it was and the next request goes
// there without a lookup; after a cut (the actor is going) the router
// looks again.
func TestTunnelErrorTarget(t *testing.T) {
	tests := []struct {
		kind        tunnelproto.ErrorKind
		code        int
		wantLookups int64
	}{
		{tunnelproto.KindRefused, http.StatusBadGateway, 1},
		{tunnelproto.KindUpstream, http.StatusBadGateway, 1},
		{tunnelproto.KindCut, http.StatusServiceUnavailable, 2},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			res := warmResolver(t, tunnelAnswering(t, tt.kind, tt.code), Policy{})
			srv, _ := newRouter(t, Config{}, res)
			for i := range 2 {
				if got := get(t, srv, "app.default.actors.localhost", "/", nil); got.status != tt.code {
					t.Fatalf("request %d: %d %q, want %d", i, got.status, got.body, tt.code)
				}
			}
			if n := res.lookups.Load(); n != tt.wantLookups {
				t.Errorf("Lookup called %d times, want %d", n, tt.wantLookups)
			}
		})
	}
}
