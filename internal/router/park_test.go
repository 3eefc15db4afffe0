package router

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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

// slowRestore mimics the API server's ResumeActor for one actor: the
// first call claims a worker after claimAfter (if ever) and the restore
// lands at restoreAt, whatever the calls' deadlines; a call whose deadline
// passes first fails with DeadlineExceeded, as over gRPC, and a later
// call waits for the same restore (the server serialises resumes per
// actor).
type slowRestore struct {
	tunnel     string
	claimAfter time.Duration // <0: no worker is ever free
	restoreIn  time.Duration

	mu        sync.Mutex
	started   time.Time
	claimedAt time.Time
}

func (s *slowRestore) resume(ctx context.Context, key names.ActorKey) (Target, error) {
	s.mu.Lock()
	if s.started.IsZero() {
		s.started = time.Now()
		if s.claimAfter >= 0 {
			s.claimedAt = s.started.Add(s.claimAfter)
		}
	}
	claimed := s.claimedAt
	s.mu.Unlock()
	if claimed.IsZero() {
		<-ctx.Done()
		return Target{}, controlError("ResourceExhausted", "no free worker", ErrNoCapacity)
	}
	t := time.NewTimer(time.Until(claimed.Add(s.restoreIn)))
	defer t.Stop()
	select {
	case <-t.C:
		return targetAt(key, "w1", s.tunnel), nil
	case <-ctx.Done():
		return Target{}, contextError(ctx)
	}
}

func (s *slowRestore) assigned(context.Context, names.ActorKey) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.claimedAt.IsZero() && time.Now().After(s.claimedAt), nil
}

// TestParkBudgetAndGrace: a request whose budget runs out while its actor
// is being restored on a worker waits a bounded grace instead of failing;
// without a worker, or past the grace, it gets 503 naming the reason.
func TestParkBudgetAndGrace(t *testing.T) {
	const budget, grace = 400 * time.Millisecond, 600 * time.Millisecond
	tests := []struct {
		name                  string
		claimAfter, restoreIn time.Duration
		wantStatus            int
		wantBody              string
		minWait, maxWait      time.Duration
	}{
		{name: "resume lands 300ms after the budget", claimAfter: 50 * time.Millisecond, restoreIn: budget + 250*time.Millisecond,
			wantStatus: 200, wantBody: "tunnel ", minWait: budget + 250*time.Millisecond, maxWait: budget + grace},
		{name: "no worker within the budget", claimAfter: -1,
			wantStatus: 503, wantBody: "park budget of 400ms exhausted: actor default/app was not resumed in time; retry later\n",
			minWait: budget, maxWait: budget + 300*time.Millisecond},
		{name: "restore outlasts the grace", claimAfter: 50 * time.Millisecond, restoreIn: budget + grace + time.Second,
			wantStatus: 503, wantBody: "park budget of 400ms and grace of 600ms exhausted: actor default/app was still being restored; retry later\n",
			minWait: budget + grace, maxWait: budget + grace + 300*time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &slowRestore{tunnel: echoTunnel(t, "tunnel", nil), claimAfter: tt.claimAfter, restoreIn: tt.restoreIn}
			res := &fakeResolver{t: t, resume: s.resume, assigned: s.assigned}
			srv, _ := newRouter(t, Config{ParkBudget: budget, ParkGrace: grace}, res)
			start := time.Now()
			got := get(t, srv, "app.default.actors.localhost", "/", nil)
			took := time.Since(start)
			if got.status != tt.wantStatus || !strings.HasPrefix(got.msg, tt.wantBody) {
				t.Fatalf("got %d %q, want %d %q", got.status, got.body, tt.wantStatus, tt.wantBody)
			}
			if took < tt.minWait || took > tt.maxWait {
				t.Errorf("answered after %s, want %s..%s", took, tt.minWait, tt.maxWait)
			}
			if got.status == 503 && got.retryAfter != "1" {
				t.Errorf("503 without Retry-After")
			}
			if got.status == 200 {
				ms, err := strconv.Atoi(got.header.Get(HeaderActivationMs))
				if got.activation != "resumed" || err != nil || time.Duration(ms)*time.Millisecond < tt.minWait {
					t.Errorf("activation %q, %s %q; want resumed and at least %s",
						got.activation, HeaderActivationMs, got.header.Get(HeaderActivationMs), tt.minWait)
				}
			}
		})
	}
}

// TestLateJoinerOutlivesTheSharedCall: a request that joins a resume late
// keeps its own budget. When the shared call runs out of time before it
// (no worker freed), it starts another and is served once a worker frees.
func TestLateJoinerOutlivesTheSharedCall(t *testing.T) {
	const budget = time.Second
	tunnel := echoTunnel(t, "tunnel", nil)
	var mu sync.Mutex
	var freeAt time.Time // zero until the test decides
	res := &fakeResolver{t: t, resume: func(ctx context.Context, key names.ActorKey) (Target, error) {
		for {
			mu.Lock()
			free := !freeAt.IsZero() && time.Now().After(freeAt)
			mu.Unlock()
			if free {
				return targetAt(key, "w1", tunnel), nil
			}
			select {
			case <-ctx.Done():
				return Target{}, controlError("ResourceExhausted", "no free worker", ErrNoCapacity)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}}
	srv, h := newRouter(t, Config{ParkBudget: budget}, res)
	first := make(chan reply, 1)
	go func() { first <- get(t, srv, "app.default.actors.localhost", "/", nil) }()
	testwait.Until(t, "the first request to park", func() bool { return h.act.flights.Waiting() == 1 })
	start := time.Now()
	second := make(chan reply, 1)
	time.AfterFunc(budget/2, func() { second <- get(t, srv, "app.default.actors.localhost", "/", nil) })
	if r := <-first; r.status != 503 {
		t.Fatalf("first request: %d %q, want 503 (no worker within its budget)", r.status, r.body)
	}
	// The shared call is over; a worker frees while the second request
	// still has budget left.
	mu.Lock()
	freeAt = time.Now().Add(budget / 4)
	mu.Unlock()
	r := <-second
	if r.status != 200 {
		t.Fatalf("late joiner: %d %q after %s, want 200", r.status, r.body, time.Since(start))
	}
	if n := res.resumes.Load(); n < 2 {
		t.Errorf("Resume called %d times, want a second shared call", n)
	}
}

// TestAbortedResumeIsRetried: a resume the control plane aborted over a
// concurrent change is tried again within the budget.
func TestAbortedResumeIsRetried(t *testing.T) {
	tunnel := echoTunnel(t, "tunnel", nil)
	var calls atomic.Int64
	res := &fakeResolver{t: t, resume: func(_ context.Context, key names.ActorKey) (Target, error) {
		if calls.Add(1) == 1 {
			return Target{}, controlError("Aborted", "record changed concurrently", ErrConflict)
		}
		return targetAt(key, "w1", tunnel), nil
	}}
	srv, _ := newRouter(t, Config{}, res)
	if got := get(t, srv, "app.default.actors.localhost", "/", nil); got.status != 200 {
		t.Fatalf("got %d %q, want 200 after a retry", got.status, got.body)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("Resume called %d times, want 2", n)
	}
}

// TestSharedAttemptFailingForTimeIsRetried: a shared resume that fails
// because the control plane found no worker in time (ResourceExhausted, or
// DeadlineExceeded) fails that attempt, not the requests waiting on it:
// with budget left, they start another, and it serves them all.
func TestSharedAttemptFailingForTimeIsRetried(t *testing.T) {
	const n = 5
	tests := []struct {
		name string
		err  error
	}{
		{"deadline exceeded", controlError("DeadlineExceeded", "stream terminated by RST_STREAM with error code: CANCEL", ErrNoCapacity, context.DeadlineExceeded)},
		{"resource exhausted", controlError("ResourceExhausted", "no free worker", ErrNoCapacity)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tunnel := echoTunnel(t, "tunnel", nil)
			release := make(chan struct{})
			var calls atomic.Int64
			var running atomic.Bool
			res := &fakeResolver{t: t,
				// As the API server: RUNNING once a resume succeeded, so
				// a request retrying after that finds it warm.
				lookup: func(_ context.Context, key names.ActorKey) (Target, bool, error) {
					return targetAt(key, "w1", tunnel), running.Load(), nil
				},
				resume: func(ctx context.Context, key names.ActorKey) (Target, error) {
					if calls.Add(1) == 1 {
						select {
						case <-release:
							return Target{}, tt.err
						case <-ctx.Done():
							return Target{}, ctx.Err()
						}
					}
					running.Store(true)
					return targetAt(key, "w1", tunnel), nil
				},
			}
			srv, h := newRouter(t, Config{}, res)
			count := map[string]int{}
			for _, r := range coldBurst(t, srv, h, n, release) {
				if r.status != 200 {
					t.Errorf("reply: %d %q %v, want 200 from the second attempt", r.status, r.body, r.err)
				}
				count[r.activation]++
			}
			if count["resumed"] != 1 || count["joined"]+count["warm"] != n-1 {
				t.Errorf("activations %v, want 1 resumed and the rest joined or warm", count)
			}
			if c := calls.Load(); c != 2 {
				t.Errorf("Resume called %d times, want 2", c)
			}
		})
	}
}

// TestJoinersOutliveSharedCallFailingAtItsDeadline is the field report:
// the shared resume's deadline is its first caller's budget, and over gRPC
// it can fail with DeadlineExceeded as soon as that deadline has passed by
// the clock, before its context's timer fired. The first caller, out of
// budget, gets 503 with Retry-After; the requests that joined later still
// have theirs and are served by another attempt.
func TestJoinersOutliveSharedCallFailingAtItsDeadline(t *testing.T) {
	const budget, n = time.Second, 4
	tunnel := echoTunnel(t, "tunnel", nil)
	var h *Handler
	var calls atomic.Int64
	var running atomic.Bool
	joinedFirst := make(chan int64, 1)
	res := &fakeResolver{t: t, lookup: func(_ context.Context, key names.ActorKey) (Target, bool, error) {
		return targetAt(key, "w1", tunnel), running.Load(), nil
	}}
	res.resume = func(ctx context.Context, key names.ActorKey) (Target, error) {
		if calls.Add(1) > 1 {
			running.Store(true)
			return targetAt(key, "w1", tunnel), nil
		}
		// Fail the moment the clock passes the deadline, as grpc-go turns
		// the server's RST_STREAM(CANCEL) into DeadlineExceeded: a timer
		// to just short of it, then spin, to beat ctx's own timer (most
		// of the time: the scheduler may still run it first).
		d, _ := ctx.Deadline()
		select {
		case <-time.After(time.Until(d) - 2*time.Millisecond):
		case <-ctx.Done():
		}
		for time.Now().Before(d) {
			// Not runtime.Gosched: yielding lets ctx's timer fire first.
		}
		joinedFirst <- h.act.flights.Waiting()
		return Target{}, controlError("DeadlineExceeded", "stream terminated by RST_STREAM with error code: CANCEL", ErrNoCapacity, context.DeadlineExceeded)
	}
	srv, h := newRouter(t, Config{ParkBudget: budget, ParkGrace: budget}, res)
	first := make(chan reply, 1)
	go func() { first <- get(t, srv, "app.default.actors.localhost", "/", nil) }()
	testwait.Until(t, "the first request to park", func() bool { return h.act.flights.Waiting() == 1 })
	// The joiners arrive well into the first request's budget: the shared
	// call's deadline is theirs minus that.
	replies := make(chan reply, n)
	var wg sync.WaitGroup
	started := make(chan struct{})
	time.AfterFunc(budget/3, func() {
		for range n {
			wg.Go(func() { replies <- get(t, srv, "app.default.actors.localhost", "/", nil) })
		}
		close(started)
	})
	if r := <-first; r.status != 503 || r.retryAfter != "1" {
		t.Errorf("first request: %d %q Retry-After %q, want 503 with Retry-After (its budget ran out)", r.status, r.body, r.retryAfter)
	}
	// The first request may have stopped waiting already.
	if w := <-joinedFirst; w < n {
		t.Errorf("%d requests waited on the first attempt when it failed, want the %d joiners: the test proves nothing", w, n)
	}
	<-started
	wg.Wait()
	close(replies)
	for r := range replies {
		if r.status != 200 {
			t.Errorf("joiner: %d %q %v, want 200: it still had budget", r.status, r.body, r.err)
		}
	}
	if c := calls.Load(); c != 2 {
		t.Errorf("Resume called %d times, want 2", c)
	}
}

// TestUnreachableNodeParks: a request for an actor whose node cannot be
// reached, which the control plane still places there (its loss deadline
// has not passed), parks until the actor is recovered elsewhere or the
// node answers again at the same address, instead of failing once the
// few retries for a moved actor are spent.
func TestUnreachableNodeParks(t *testing.T) {
	// recoverAfter is well past the 1+maxStaleRetries lookups a request
	// made before it failed with 503.
	const recoverAfter = 3 + maxStaleRetries
	t.Run("recovered on another node", func(t *testing.T) {
		dead := deadAddr(t)
		live := echoTunnel(t, "recovered", nil)
		res := &fakeResolver{t: t}
		res.lookup = func(_ context.Context, key names.ActorKey) (Target, bool, error) {
			if res.lookups.Load() <= recoverAfter {
				return targetAt(key, "w1", dead), true, nil
			}
			return targetAt(key, "w2", live), true, nil
		}
		srv, _ := newRouter(t, Config{}, res)
		got := get(t, srv, "app.default.actors.localhost", "/", nil)
		if got.status != http.StatusOK || !strings.HasPrefix(got.body, "recovered ") {
			t.Fatalf("got %d %q after %d lookups, want 200 from the node it was recovered on", got.status, got.body, res.lookups.Load())
		}
	})
	t.Run("node answers again at the same address", func(t *testing.T) {
		addr := deadAddr(t)
		res := warmResolver(t, addr, Policy{})
		srv, _ := newRouter(t, Config{}, res)
		done := make(chan reply, 1)
		go func() { done <- get(t, srv, "app.default.actors.localhost", "/", nil) }()
		testwait.Until(t, "the request to wait past the stale retries", func() bool { return res.lookups.Load() > recoverAfter })
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen again on %s: %v", addr, err)
		}
		back := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "back\n") }))
		back.Listener = ln
		back.Start()
		t.Cleanup(back.Close)
		if got := <-done; got.status != http.StatusOK || got.body != "back\n" {
			t.Fatalf("got %d %q, want 200 from the node back at %s", got.status, got.body, addr)
		}
	})
}

// TestNotServingNodeParks: a node that serves nothing (its lease ran out
// by its own count, as under a partition that lets the router through
// but not the control plane's renewals) answers 421 with
// tunnelproto.HeaderNotServing for every actor it hosts. The control
// plane still places them there until it declares the node lost, so
// looking again at once finds the same worker: the request parks,
// trying the node again now and then, and is served once the actor is
// recovered elsewhere or the node serves again; it is not failed after
// maxStaleRetries.
func TestNotServingNodeParks(t *testing.T) {
	const recoverAfter = 3 + maxStaleRetries
	notServing := func(t *testing.T, refusals *atomic.Int64, back func() bool) string {
		return newTunnel(t, func(w http.ResponseWriter, _ *http.Request) {
			if back != nil && back() {
				_, _ = io.WriteString(w, "back\n")
				return
			}
			refusals.Add(1)
			w.Header().Set(tunnelproto.HeaderNotServing, "1")
			http.Error(w, "node serves nothing", tunnelproto.StatusStale)
		})
	}
	t.Run("recovered on another node", func(t *testing.T) {
		var refusals atomic.Int64
		fenced, live := notServing(t, &refusals, nil), echoTunnel(t, "recovered", nil)
		res := &fakeResolver{t: t}
		res.lookup = func(_ context.Context, key names.ActorKey) (Target, bool, error) {
			if res.lookups.Load() <= recoverAfter {
				return targetAt(key, "w1", fenced), true, nil
			}
			return targetAt(key, "w2", live), true, nil
		}
		srv, _ := newRouter(t, Config{}, res)
		got := get(t, srv, "app.default.actors.localhost", "/", nil)
		if got.status != http.StatusOK || !strings.HasPrefix(got.body, "recovered ") {
			t.Fatalf("got %d %q after %d lookups, want 200 from the node it was recovered on", got.status, got.body, res.lookups.Load())
		}
		// Parked between tries, not sent again at every lookup.
		if n := refusals.Load(); n < 1 || n >= recoverAfter {
			t.Fatalf("the node that served nothing was tried %d times over %d lookups", n, res.lookups.Load())
		}
	})
	t.Run("node serves again", func(t *testing.T) {
		var refusals atomic.Int64
		addr := notServing(t, &refusals, func() bool { return refusals.Load() > maxStaleRetries+1 })
		res := warmResolver(t, addr, Policy{})
		srv, _ := newRouter(t, Config{}, res)
		if got := get(t, srv, "app.default.actors.localhost", "/", nil); got.status != http.StatusOK || got.body != "back\n" {
			t.Fatalf("got %d %q after %d refusals, want 200 once the node serves again", got.status, got.body, refusals.Load())
		}
	})
}

// dyingTunnel listens at an address, reads one request, and then, as a
// node killed with the request in flight, resets the connection and
// (unless stays) stops listening. It returns the address.
func dyingTunnel(t *testing.T, stays bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
				_ = c.Close()
				continue
			}
			if !stays {
				_ = ln.Close()
			}
			_ = c.(*net.TCPConn).SetLinger(0) // close with RST
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}

// TestRequestLostWithItsNode: a request in flight when its actor's node
// dies (the tunnel connection is reset and the tunnel then refuses
// connections) is sent again once the actor is recovered elsewhere if
// its method is idempotent: what the actor did with it died with the
// node. A POST is answered 502 (its client decides), and so is a GET
// whose connection broke while the node still listens (it may have run).
func TestRequestLostWithItsNode(t *testing.T) {
	for _, c := range []struct {
		name   string
		method string
		stays  bool
		status int
	}{
		{"GET, node gone", http.MethodGet, false, http.StatusOK},
		{"PUT, node gone", http.MethodPut, false, http.StatusOK},
		{"POST, node gone", http.MethodPost, false, http.StatusBadGateway},
		{"GET, node still listening", http.MethodGet, true, http.StatusBadGateway},
	} {
		t.Run(c.name, func(t *testing.T) {
			dying, live := dyingTunnel(t, c.stays), echoTunnel(t, "recovered", nil)
			res := &fakeResolver{t: t}
			res.lookup = func(_ context.Context, key names.ActorKey) (Target, bool, error) {
				if res.lookups.Load() <= 3 {
					return targetAt(key, "w1", dying), true, nil
				}
				return targetAt(key, "w2", live), true, nil
			}
			srv, _ := newRouter(t, Config{}, res)
			req, err := http.NewRequestWithContext(t.Context(), c.method, srv.URL+"/", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "app.default.actors.localhost"
			if got := send(srv, req); got.err != nil || got.status != c.status {
				t.Fatalf("%s: %d %q (%v), want %d", c.method, got.status, got.body, got.err, c.status)
			}
		})
	}
}
