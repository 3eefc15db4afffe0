package router

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/streams"
	"substrate.dev/ate/internal/testwait"
)

// listenHeader makes a GET a listening stream (streams.IsListen).
var listenHeader = map[string]string{"Accept": "text/event-stream"}

const appHost = "app.default.actors.localhost"

// TestIdleListeningStreams: an open listening stream keeps the actor
// awake by default, and does not with streams.idle: ignore — the actor is
// put away while it is open. Another open request still counts.
func TestIdleListeningStreams(t *testing.T) {
	const after = 100 * time.Millisecond
	for _, tt := range []struct {
		name   string
		sp     streams.Policy
		header map[string]string
		away   bool
	}{
		{"listening stream counts by default", streams.Policy{}, listenHeader, false},
		{"ignored listening stream", streams.Policy{IgnoreIdle: true}, listenHeader, true},
		{"ignore leaves other requests", streams.Policy{IgnoreIdle: true}, nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			idler := &fakeIdler{}
			p := Policy{IdleAfter: after, IdleAction: checkpoint.Suspend, Streams: tt.sp}
			cfg := Config{Idler: idler, Activity: idler, IdleCheckInterval: 10 * time.Millisecond, ActivityInterval: 20 * time.Millisecond}
			srv, h := newRouter(t, cfg, warmResolver(t, holdTunnel(t, release), p))
			startLoop(t, h)
			streamed := make(chan reply, 1)
			go func() { streamed <- get(t, srv, appHost, "/hold", tt.header) }()
			testwait.Until(t, "the stream to open", func() bool { return h.InFlight() == 1 })
			open := time.Now()
			if tt.away {
				testwait.Until(t, "the idle action", func() bool { c, _ := idler.callLog(); return len(c) == 1 })
				if h.InFlight() != 1 {
					t.Fatal("the stream ended before the idle action")
				}
				return
			}
			testwait.Until(t, "4×idle.after with the stream open", func() bool { return time.Since(open) > 4*after })
			if calls, _ := idler.callLog(); len(calls) != 0 {
				t.Fatalf("actor put away with the stream open: %v", calls)
			}
		})
	}
}

// sleepingActor is a resolver for default/app, not running until a
// Resume, whose template says wakeOn: request when hold is set.
func sleepingActor(t *testing.T, tunnel string, hold bool) *fakeResolver {
	var running atomic.Bool
	p := Policy{Streams: streams.Policy{WakeOnRequest: hold}}
	return &fakeResolver{t: t,
		lookup: func(_ context.Context, key names.ActorKey) (Target, bool, error) {
			tg := targetAt(key, "w1", tunnel)
			tg.Policy = p
			if !running.Load() {
				return Target{Actor: key, UID: tg.UID, Policy: p}, false, nil
			}
			return tg, true, nil
		},
		resume: func(_ context.Context, key names.ActorKey) (Target, error) {
			running.Store(true)
			tg := targetAt(key, "w1", tunnel)
			tg.Policy = p
			return tg, nil
		},
	}
}

// held returns how many listening streams h holds for default/app.
func held(h *Handler) int {
	h.act.mu.Lock()
	defer h.act.mu.Unlock()
	if st, ok := h.act.actors[names.ActorKey{Atespace: "default", Name: "app"}]; ok {
		return st.held
	}
	return 0
}

// TestHeldStreamWaitsForRealRequest: with wakeOn: request a listening
// stream to a sleeping actor does not resume it; it is held until a real
// request does, and then goes on to the actor ("joined").
func TestHeldStreamWaitsForRealRequest(t *testing.T) {
	res := sleepingActor(t, echoTunnel(t, "app", nil), true)
	srv, h := newRouter(t, Config{}, res)
	streamed := make(chan reply, 1)
	go func() { streamed <- get(t, srv, appHost, "/events", listenHeader) }()
	testwait.Until(t, "the stream to be held", func() bool { return held(h) == 1 })
	if n := res.resumes.Load(); n != 0 {
		t.Fatalf("a held stream resumed the actor (%d resumes)", n)
	}
	if r := get(t, srv, appHost, "/", nil); r.status != http.StatusOK || r.activation != "resumed" {
		t.Fatalf("real request: %d %q %q, want 200 resumed", r.status, r.activation, r.body)
	}
	r := <-streamed
	if r.status != http.StatusOK || r.activation != "joined" || r.header.Get(HeaderActivationMs) == "" {
		t.Fatalf("held stream: %d %q %q, want 200 joined with the wait", r.status, r.activation, r.body)
	}
	if n := res.resumes.Load(); n != 1 {
		t.Errorf("%d resumes, want the real request's only", n)
	}
	if held(h) != 0 {
		t.Error("the stream still counts as held")
	}
}

// TestListeningStreamWakesByDefault: without wakeOn: request a listening
// stream resumes its actor like any request.
func TestListeningStreamWakesByDefault(t *testing.T) {
	res := sleepingActor(t, echoTunnel(t, "app", nil), false)
	srv, _ := newRouter(t, Config{}, res)
	if r := get(t, srv, appHost, "/events", listenHeader); r.status != http.StatusOK || r.activation != "resumed" {
		t.Fatalf("stream: %d %q %q, want 200 resumed", r.status, r.activation, r.body)
	}
}

// TestDrainEndsHeldStreams: a held stream is answered 503 + Retry-After
// when the router drains, so its client reconnects elsewhere, and the
// actor is not resumed.
func TestDrainEndsHeldStreams(t *testing.T) {
	res := sleepingActor(t, echoTunnel(t, "app", nil), true)
	srv, h := newRouter(t, Config{}, res)
	streamed := make(chan reply, 1)
	go func() { streamed <- get(t, srv, appHost, "/events", listenHeader) }()
	testwait.Until(t, "the stream to be held", func() bool { return held(h) == 1 })
	h.Drain()
	r := <-streamed
	if r.status != http.StatusServiceUnavailable || r.retryAfter == "" {
		t.Fatalf("held stream on drain: %d retry-after %q %q, want 503 with Retry-After", r.status, r.retryAfter, r.body)
	}
	if n := res.resumes.Load(); n != 0 {
		t.Errorf("%d resumes, want none", n)
	}
}
