package router

import (
	"context"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/testwait"
	"substrate.dev/ate/internal/tunnelproto"
)

func TestRouting(t *testing.T) {
	tunnel := echoTunnel(t, "tunnel", nil)
	res := &fakeResolver{t: t, lookup: func(_ context.Context, key names.ActorKey) (Target, bool, error) {
		if key.Name == "ghost" {
			return Target{}, false, controlError("NotFound", "no such actor", ErrActorNotFound)
		}
		return targetAt(key, "w-"+key.Name, tunnel), true, nil
	}}
	srv, _ := newRouter(t, Config{}, res)

	tests := []struct {
		name       string
		host, path string
		hdr        map[string]string
		wantStatus int
		wantBody   []string
	}{
		{name: "host", host: "app.default.actors.localhost", path: "/p?q=1", wantStatus: 200,
			wantBody: []string{"host=app.default.actors.localhost ", "worker=w-app ", "uid=uid-default/app ", "uri=/p?q=1 ", "xff=true"}},
		{name: "host with port", host: "app.team.actors.localhost:8080", path: "/", wantStatus: 200,
			wantBody: []string{"uid=uid-team/app ", "host=app.team.actors.localhost:8080 "}},
		{name: "header", host: "localhost", path: "/x", hdr: map[string]string{HeaderTargetActor: "team/app"}, wantStatus: 200,
			wantBody: []string{"uid=uid-team/app ", "host=localhost ", "uri=/x "}},
		{name: "header in default atespace", host: "localhost", path: "/", hdr: map[string]string{HeaderTargetActor: "app"}, wantStatus: 200,
			wantBody: []string{"uid=uid-default/app "}},
		{name: "header wins over host", host: "app.default.actors.localhost", path: "/", hdr: map[string]string{HeaderTargetActor: "team/other"}, wantStatus: 200,
			wantBody: []string{"uid=uid-team/other ", "worker=w-other "}},
		{name: "health of an actor is proxied", host: "app.default.actors.localhost", path: "/healthz", wantStatus: 200,
			wantBody: []string{"uri=/healthz "}},
		{name: "no actor", host: "localhost", path: "/", wantStatus: 404,
			wantBody: []string{"Host: <name>.<atespace>.actors.localhost", HeaderTargetActor + ": <atespace>/<name>"}},
		{name: "healthz", host: "localhost", path: "/healthz", wantStatus: 200, wantBody: []string{"ok"}},
		{name: "readyz", host: "localhost", path: "/readyz", wantStatus: 200, wantBody: []string{"ok"}},
		{name: "invalid header name", host: "localhost", path: "/", hdr: map[string]string{HeaderTargetActor: "Team/App"}, wantStatus: 400,
			wantBody: []string{"invalid name", "DNS-1123"}},
		{name: "invalid host name", host: "a_b.default.actors.localhost", path: "/", wantStatus: 400,
			wantBody: []string{"invalid name", `"a_b"`}},
		{name: "unknown actor", host: "ghost.default.actors.localhost", path: "/", wantStatus: 404,
			wantBody: []string{"actor default/ghost not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := get(t, srv, tt.host, tt.path, tt.hdr)
			if got.err != nil {
				t.Fatal(got.err)
			}
			if got.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %q)", got.status, tt.wantStatus, got.body)
			}
			for _, want := range tt.wantBody {
				if !strings.Contains(got.body, want) {
					t.Errorf("body %q lacks %q", got.body, want)
				}
			}
		})
	}
}

func TestWarmTargetIsCached(t *testing.T) {
	tunnel := echoTunnel(t, "tunnel", nil)
	res := warmResolver(t, tunnel, Policy{})
	srv, _ := newRouter(t, Config{}, res)
	for i := range 3 {
		got := get(t, srv, "app.default.actors.localhost", "/", nil)
		if got.status != 200 || got.activation != "warm" {
			t.Fatalf("request %d: status %d activation %q, want 200 warm", i, got.status, got.activation)
		}
	}
	if n := res.lookups.Load(); n != 1 {
		t.Errorf("Lookup called %d times, want 1 (then cached)", n)
	}
}

func TestClientWorkerHeadersAreReplaced(t *testing.T) {
	tunnel := echoTunnel(t, "tunnel", nil)
	res := warmResolver(t, tunnel, Policy{})
	srv, _ := newRouter(t, Config{}, res)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "app.default.actors.localhost"
	req.Header.Add(tunnelproto.HeaderWorker, "evil")
	req.Header.Add(tunnelproto.HeaderWorker, "evil2")
	req.Header.Set(tunnelproto.HeaderActorUID, "forged")
	req.Header.Set(tunnelproto.HeaderAssignment, "1")
	got := send(srv, req)
	if got.status != 200 || !strings.Contains(got.body, "worker=w1 uid=uid-default/app ") || !strings.Contains(got.body, " assignment=5\n") {
		t.Fatalf("got %d %q, want 200 with only the router's worker, uid and assignment", got.status, got.body)
	}
}

// TestConcurrentColdRequestsShareOneResume parks 30 requests on one
// not-running actor and releases the resume only once all have joined.
func TestConcurrentColdRequestsShareOneResume(t *testing.T) {
	const n = 30
	tunnel := echoTunnel(t, "tunnel", nil)
	release := make(chan struct{})
	res := &fakeResolver{t: t, resume: resumeOnRelease(release, "w1", tunnel)}
	srv, h := newRouter(t, Config{}, res)

	count := map[string]int{}
	for _, r := range coldBurst(t, srv, h, n, release) {
		if r.err != nil || r.status != 200 {
			t.Errorf("reply: status %d err %v body %q", r.status, r.err, r.body)
		}
		if _, err := strconv.Atoi(r.header.Get(HeaderActivationMs)); err != nil {
			t.Errorf("%s reply without %s: %q", r.activation, HeaderActivationMs, r.header.Get(HeaderActivationMs))
		}
		count[r.activation]++
	}
	if count["resumed"] != 1 || count["joined"] != n-1 {
		t.Errorf("activations = %v, want 1 resumed and %d joined", count, n-1)
	}
	// The burst's admission checks share one Lookup (admissionLookup);
	// the shared resume makes a second only when its leader is a request
	// that came after that Lookup had remembered the policy, and so
	// brought none of its own (pre) — a matter of scheduling.
	if l, r := res.lookups.Load(), res.resumes.Load(); l < 1 || l > 2 || r != 1 {
		t.Errorf("Lookup called %d times, Resume %d times; want 1 or 2, and 1", l, r)
	}
	if got := get(t, srv, "app.default.actors.localhost", "/", nil); got.activation != "warm" || got.header.Get(HeaderActivationMs) != "" {
		t.Errorf("after the resume: activation %q, %s %q; want warm without it", got.activation,
			HeaderActivationMs, got.header.Get(HeaderActivationMs))
	}
}

// TestActivationSaysEvictionWithoutName: when the resume had the control
// plane evict another actor, every request it served says so, as a
// parameter of its activation, without the evicted actor's name (another
// tenant's, perhaps, and the client is anonymous); otherwise the
// activation is the bare token. No part of the answer names the actor.
func TestActivationSaysEvictionWithoutName(t *testing.T) {
	const n = 5
	tests := []struct {
		name                    string
		evicted                 names.ActorKey
		wantResumed, wantJoined string
	}{
		{name: "no eviction", wantResumed: "resumed", wantJoined: "joined"},
		{name: "eviction", evicted: names.ActorKey{Atespace: "default", Name: "counter-1"},
			wantResumed: `resumed;evicted`, wantJoined: `joined;evicted`},
		{name: "eviction in another atespace", evicted: names.ActorKey{Atespace: "victims", Name: "secret-project"},
			wantResumed: `resumed;evicted`, wantJoined: `joined;evicted`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tunnel := echoTunnel(t, "tunnel", nil)
			release := make(chan struct{})
			res := &fakeResolver{t: t, resumption: Resumption{Evicted: tt.evicted}, resume: resumeOnRelease(release, "w1", tunnel)}
			srv, h := newRouter(t, Config{}, res)
			count := map[string]int{}
			for _, r := range coldBurst(t, srv, h, n, release) {
				if r.status != 200 {
					t.Errorf("reply: %d %q %v", r.status, r.body, r.err)
				}
				if !tt.evicted.IsZero() {
					for k, vs := range r.header {
						for _, v := range vs {
							if strings.Contains(v, tt.evicted.Name) {
								t.Errorf("response header %s: %q names the evicted actor", k, v)
							}
						}
					}
					if strings.Contains(r.body, tt.evicted.Name) {
						t.Errorf("response body %q names the evicted actor", r.body)
					}
				}
				count[r.activation]++
			}
			if want := map[string]int{tt.wantResumed: 1, tt.wantJoined: n - 1}; !maps.Equal(count, want) {
				t.Errorf("activations %v, want %v", count, want)
			}
			// The eviction belongs to that resume, not to the actor.
			if got := get(t, srv, "app.default.actors.localhost", "/", nil); got.activation != "warm" {
				t.Errorf("after the resume: activation %q, want warm", got.activation)
			}
		})
	}
}

func TestParkMaxExceeded(t *testing.T) {
	tunnel := echoTunnel(t, "tunnel", nil)
	release := make(chan struct{})
	res := &fakeResolver{t: t, resume: resumeOnRelease(release, "w1", tunnel)}
	srv, h := newRouter(t, Config{ParkMax: 2}, res)

	parked := make(chan reply, 2)
	for _, name := range []string{"a", "b"} {
		go func() { parked <- get(t, srv, name+".default.actors.localhost", "/", nil) }()
	}
	testwait.Until(t, "two parked requests", func() bool { return h.act.flights.Waiting() == 2 })

	got := get(t, srv, "c.default.actors.localhost", "/", nil)
	if got.status != http.StatusServiceUnavailable || got.retryAfter != "1" || !strings.Contains(got.body, "limit 2") {
		t.Errorf("over ParkMax: got %d Retry-After %q body %q; want 503, 1, naming the limit", got.status, got.retryAfter, got.body)
	}
	close(release)
	for range 2 {
		if r := <-parked; r.status != 200 {
			t.Errorf("parked request: status %d body %q err %v", r.status, r.body, r.err)
		}
	}
}

func TestResumeFailures(t *testing.T) {
	tests := []struct {
		name           string
		budget         time.Duration
		resume         func(ctx context.Context) error
		wantStatus     int
		wantRetryAfter string
		wantBody       string
	}{
		{name: "park budget exhausted while resume blocks", budget: 50 * time.Millisecond,
			resume:     func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
			wantStatus: 503, wantRetryAfter: "1", wantBody: "park budget of 50ms exhausted: actor default/app was not resumed in time; retry later\n"},
		{name: "no free worker until the budget runs out", budget: 100 * time.Millisecond,
			resume: func(context.Context) error {
				return controlError("ResourceExhausted", "all workers busy", ErrNoCapacity)
			},
			wantStatus: 503, wantRetryAfter: "1", wantBody: "park budget of 100ms exhausted: actor default/app was not resumed in time; retry later\n"},
		{name: "unavailable",
			resume: func(context.Context) error {
				return controlError("Unavailable", "restore failed: snapshot corrupt", ErrResumeFailed)
			},
			wantStatus: 502, wantBody: "actor default/app could not be resumed; its last snapshot is kept and the next request tries again\n"},
		{name: "failed precondition",
			resume: func(context.Context) error {
				return controlError("FailedPrecondition", "actor is DELETING", ErrNotResumable)
			},
			wantStatus: 409, wantBody: "actor default/app cannot be resumed now (it is being deleted or changed); retry later\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &fakeResolver{t: t, resume: func(ctx context.Context, _ names.ActorKey) (Target, error) {
				return Target{}, tt.resume(ctx)
			}}
			srv, _ := newRouter(t, Config{ParkBudget: tt.budget}, res)
			got := get(t, srv, "app.default.actors.localhost", "/", nil)
			if got.status != tt.wantStatus || got.retryAfter != tt.wantRetryAfter || got.msg != tt.wantBody {
				t.Errorf("got %d Retry-After %q body %q; want %d %q %q",
					got.status, got.retryAfter, got.body, tt.wantStatus, tt.wantRetryAfter, tt.wantBody)
			}
		})
	}
}

// TestStaleTarget: a tunnel that answers 421 or refuses connections gets
// the actor resolved again once, and the request — which the actor never
// saw — is sent again with its whole body, unless the body outgrew what
// the router keeps: then 503, and the actor is resumed in the background.
func TestStaleTarget(t *testing.T) {
	misdirected := misdirectedTunnel(t)
	// A tunnel that read the whole body before answering 421: past
	// maxReplayBody the router no longer holds it to send again.
	readThenMisdirected := newTunnel(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "actor not here", http.StatusMisdirectedRequest)
	})
	tests := []struct {
		name         string
		staleAddr    string
		method, body string
		wantStatus   int
		wantFreshHit int64
	}{
		{name: "421 GET is retried", staleAddr: misdirected, method: http.MethodGet, wantStatus: 200, wantFreshHit: 1},
		{name: "421 POST is retried with its body", staleAddr: misdirected, method: http.MethodPost, body: "x", wantStatus: 200, wantFreshHit: 1},
		{name: "refused GET is retried", staleAddr: deadAddr(t), method: http.MethodGet, wantStatus: 200, wantFreshHit: 1},
		{name: "refused POST is retried with its body", staleAddr: deadAddr(t), method: http.MethodPost, body: "x", wantStatus: 200, wantFreshHit: 1},
		{name: "refused POST with a large body is retried (nothing was read)", staleAddr: deadAddr(t), method: http.MethodPost,
			body: strings.Repeat("y", maxReplayBody+1), wantStatus: 200, wantFreshHit: 1},
		{name: "421 after reading a large body answers 503 and resumes in the background", staleAddr: readThenMisdirected,
			method: http.MethodPost, body: strings.Repeat("y", maxReplayBody+1), wantStatus: 503, wantFreshHit: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var freshHits, lookups atomic.Int64
			fresh := echoTunnel(t, "fresh", &freshHits)
			res := &fakeResolver{t: t,
				// Running on the stale tunnel at first, then suspended.
				lookup: func(_ context.Context, key names.ActorKey) (Target, bool, error) {
					return targetAt(key, "stale", tt.staleAddr), lookups.Add(1) == 1, nil
				},
				resume: func(_ context.Context, key names.ActorKey) (Target, error) {
					return targetAt(key, "fresh", fresh), nil
				},
			}
			srv, _ := newRouter(t, Config{}, res)
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			req, err := http.NewRequestWithContext(t.Context(), tt.method, srv.URL+"/", body)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "app.default.actors.localhost"
			got := send(srv, req)
			if got.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %q)", got.status, tt.wantStatus, got.body)
			}
			if got.status == 503 && (got.retryAfter != "1" || !strings.Contains(got.body, "retry")) {
				t.Errorf("503 without Retry-After or advice: %q %q", got.retryAfter, got.body)
			}
			if got.status == 200 && got.activation != "resumed" {
				t.Errorf("activation = %q, want resumed", got.activation)
			}
			if n := freshHits.Load(); n != tt.wantFreshHit {
				t.Errorf("fresh tunnel hit %d times, want %d", n, tt.wantFreshHit)
			}
			// Retried or not, the actor is resolved again exactly once
			// (in the background for the unreplayable request).
			testwait.Until(t, "the re-resolve", func() bool { return res.resumes.Load() == 1 })
			if n := lookups.Load(); n != 2 {
				t.Errorf("Lookup called %d times, want 2", n)
			}
		})
	}
}

// TestStillStaleAfterRetry: when every re-resolved target is stale too,
// the client gets 503 with Retry-After after maxStaleRetries retries, and
// no activation headers from any attempt.
func TestStillStaleAfterRetry(t *testing.T) {
	res := warmResolver(t, misdirectedTunnel(t), Policy{})
	srv, _ := newRouter(t, Config{}, res)
	got := get(t, srv, "app.default.actors.localhost", "/", nil)
	if got.status != 503 || got.retryAfter != "1" || got.msg != "actor default/app moved while the request was in flight; retry\n" {
		t.Fatalf("got %d %q %q, want 503 with Retry-After", got.status, got.retryAfter, got.body)
	}
	if got.activation != "" || got.header.Get(HeaderActivationMs) != "" {
		t.Errorf("failure carries %s %q, %s %q", HeaderActivation, got.activation,
			HeaderActivationMs, got.header.Get(HeaderActivationMs))
	}
	if n := res.lookups.Load(); n != 1+maxStaleRetries {
		t.Errorf("Lookup called %d times, want %d", n, 1+maxStaleRetries)
	}
}

// TestStaleAgainAfterRetry: a checkpoint queued behind the resume a
// request waited for can make its new target stale at once (a client
// pausing an actor while it sends to it); the request is sent again while
// retries remain, and served.
func TestStaleAgainAfterRetry(t *testing.T) {
	var hits atomic.Int64
	tunnel := newTunnel(t, func(w http.ResponseWriter, _ *http.Request) {
		if hits.Add(1) <= 2 {
			http.Error(w, "actor not here", http.StatusMisdirectedRequest)
			return
		}
		_, _ = io.WriteString(w, "served\n")
	})
	res := warmResolver(t, tunnel, Policy{})
	srv, _ := newRouter(t, Config{}, res)
	got := get(t, srv, "app.default.actors.localhost", "/", nil)
	if got.status != 200 || got.body != "served\n" || hits.Load() != 3 {
		t.Fatalf("got %d %q after %d tunnel requests, want 200 served after 3", got.status, got.body, hits.Load())
	}
}

func TestStreamingIsFlushedIncrementally(t *testing.T) {
	second := make(chan struct{})
	tunnel := newTunnel(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
			return
		}
		select {
		case <-second:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "second\n")
	})
	srv, _ := newRouter(t, Config{}, warmResolver(t, tunnel, Policy{}))
	br := openStream(t, srv, "/stream")
	// The backend holds the second chunk until we have read the first: a
	// buffering proxy would deadlock here until the request's deadline.
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first chunk: %q, %v", line, err)
	}
	close(second)
	if line, err := br.ReadString('\n'); err != nil || line != "second\n" {
		t.Fatalf("second chunk: %q, %v", line, err)
	}
}

// TestWaiterCancelDoesNotCancelSharedResume: the request that started the
// resume leaves (its client disconnects); the resume goes on, once, and
// serves every request still waiting.
func TestWaiterCancelDoesNotCancelSharedResume(t *testing.T) {
	const joiners = 3
	tunnel := echoTunnel(t, "tunnel", nil)
	release := make(chan struct{})
	resumeCtx := make(chan context.Context, 1)
	res := &fakeResolver{t: t, resume: func(ctx context.Context, key names.ActorKey) (Target, error) {
		resumeCtx <- ctx
		select {
		case <-release:
			return targetAt(key, "w1", tunnel), nil
		case <-ctx.Done():
			return Target{}, ctx.Err()
		}
	}}
	srv, h := newRouter(t, Config{}, res)
	waiting := func(n int64) func() bool {
		return func() bool { return h.act.flights.Waiting() == n }
	}

	leaderCtx, cancelLeader := context.WithCancel(t.Context())
	defer cancelLeader()
	leaderReq, err := http.NewRequestWithContext(leaderCtx, http.MethodGet, srv.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	leaderReq.Host = "app.default.actors.localhost"
	leader := make(chan reply, 1)
	go func() { leader <- send(srv, leaderReq) }()
	testwait.Until(t, "the leader to start the resume", waiting(1))

	replies := make(chan reply, joiners)
	var wg sync.WaitGroup
	for range joiners {
		wg.Go(func() { replies <- get(t, srv, "app.default.actors.localhost", "/", nil) })
	}
	testwait.Until(t, "the joiners to wait", waiting(1+joiners))

	cancelLeader()
	if r := <-leader; r.err == nil {
		t.Fatalf("cancelled leader got an answer: %d %q", r.status, r.body)
	}
	// At most the joiners left: with the resume wrongly tied to the
	// leader, they fail too and the check below says why.
	testwait.Until(t, "the leader to stop waiting", func() bool { return h.act.flights.Waiting() <= joiners })
	if err := (<-resumeCtx).Err(); err != nil {
		t.Fatalf("shared resume context ended with the leader: %v", err)
	}
	close(release)
	wg.Wait()
	close(replies)
	for r := range replies {
		if r.status != 200 || r.activation != "joined" {
			t.Errorf("joiner: status %d activation %q err %v, want 200 joined", r.status, r.activation, r.err)
		}
	}
	if n := res.resumes.Load(); n != 1 {
		t.Errorf("Resume called %d times, want 1", n)
	}
}

// TestActivationSurvivesARetry: a request that resumed its actor, found
// the new target stale (its node stopped serving under it) and was sent
// again to the actor, found running on that try, still says it resumed
// the actor, and how long it waited over both tries. It said "warm" after
// waiting seconds (seen with `ate up` whose node fell behind its lease).
func TestActivationSurvivesARetry(t *testing.T) {
	var lookups, hits atomic.Int64
	misdirected, fresh := misdirectedTunnel(t), echoTunnel(t, "fresh", &hits)
	res := &fakeResolver{t: t,
		// Suspended at first; running on the fresh tunnel once resumed.
		lookup: func(_ context.Context, key names.ActorKey) (Target, bool, error) {
			if lookups.Add(1) == 1 {
				return Target{}, false, nil
			}
			return targetAt(key, "fresh", fresh), true, nil
		},
		resume: func(_ context.Context, key names.ActorKey) (Target, error) {
			return targetAt(key, "stale", misdirected), nil
		},
	}
	srv, _ := newRouter(t, Config{}, res)
	got := get(t, srv, "app.default.actors.localhost", "/", nil)
	if got.status != 200 || hits.Load() != 1 {
		t.Fatalf("got %d %q after %d requests to the fresh tunnel, want 200 after 1", got.status, got.body, hits.Load())
	}
	if got.activation != "resumed" {
		t.Errorf("%s = %q, want resumed", HeaderActivation, got.activation)
	}
	if ms := got.header.Get(HeaderActivationMs); ms == "" {
		t.Errorf("%s missing", HeaderActivationMs)
	}
	if n := lookups.Load(); n != 2 {
		t.Errorf("Lookup called %d times, want 2", n)
	}
}
