package router

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/testwait"
)

// fakeIdler records the idle actions and activity reports it gets.
type fakeIdler struct {
	pauseErr error
	// hold, if set, makes Pause and Suspend wait until it is closed.
	hold chan struct{}

	mu    sync.Mutex
	calls []string    // "pause default/app", "suspend default/app"
	acts  []Activity  // every activity reported, in order
	at    []time.Time // when each call in calls was made
	// reportedBefore is len(acts) when each call in calls was made.
	reportedBefore []int
}

var (
	_ Idler            = (*fakeIdler)(nil)
	_ ActivityRecorder = (*fakeIdler)(nil)
)

func (f *fakeIdler) record(what string, key names.ActorKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, what+" "+key.String())
	f.at = append(f.at, time.Now())
	f.reportedBefore = append(f.reportedBefore, len(f.acts))
}

func (f *fakeIdler) wait(ctx context.Context) error {
	if f.hold == nil {
		return nil
	}
	select {
	case <-f.hold:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeIdler) Pause(ctx context.Context, key names.ActorKey) error {
	f.record("pause", key)
	if f.pauseErr != nil {
		return f.pauseErr
	}
	return f.wait(ctx)
}

func (f *fakeIdler) Suspend(ctx context.Context, key names.ActorKey) error {
	f.record("suspend", key)
	return f.wait(ctx)
}

func (f *fakeIdler) RecordActivity(_ context.Context, acts []Activity) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acts = append(f.acts, acts...)
	return nil
}

func (f *fakeIdler) callLog() ([]string, []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls), slices.Clone(f.at)
}

func (f *fakeIdler) reports() []Activity {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.acts)
}

// startLoop runs h.Start until the test ends.
func startLoop(t *testing.T, h *Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start returned %v", err)
		}
	})
}

// idleRouter serves actor default/app, RUNNING on tunnel with policy p
// until idler puts it away; each Lookup after that finds it suspended and
// a Resume brings it back.
func idleRouter(t *testing.T, tunnel string, p Policy, idler *fakeIdler) (*fakeResolver, *Handler, func(path string) reply) {
	t.Helper()
	res := &fakeResolver{t: t,
		lookup: func(_ context.Context, key names.ActorKey) (Target, bool, error) {
			calls, _ := idler.callLog()
			tg := targetAt(key, "w1", tunnel)
			tg.Policy = p
			return tg, len(calls) == 0, nil
		},
		resume: func(_ context.Context, key names.ActorKey) (Target, error) {
			tg := targetAt(key, "w1", tunnel)
			tg.Policy = p
			return tg, nil
		},
	}
	cfg := Config{Idler: idler, Activity: idler, IdleCheckInterval: 10 * time.Millisecond, ActivityInterval: 20 * time.Millisecond}
	srv, h := newRouter(t, cfg, res)
	startLoop(t, h)
	return res, h, func(path string) reply { return get(t, srv, "app.default.actors.localhost", path, nil) }
}

// holdTunnel answers /hold only once release is closed (streaming a first
// line at once), anything else at once.
func holdTunnel(t *testing.T, release <-chan struct{}) string {
	return newTunnel(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			_, _ = io.WriteString(w, "open\n")
			_ = http.NewResponseController(w).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintln(w, "done")
	})
}

func TestIdleActorIsPutAway(t *testing.T) {
	const after = 150 * time.Millisecond
	for _, tt := range []struct {
		name     string
		action   checkpoint.Action
		pauseErr error
		want     []string
	}{
		{"pause", checkpoint.Pause, nil, []string{"pause default/app"}},
		{"suspend", checkpoint.Suspend, nil, []string{"suspend default/app"}},
		{"pause unsupported falls back to suspend", checkpoint.Pause, fmt.Errorf("pause: %w", ErrPauseUnsupported),
			[]string{"pause default/app", "suspend default/app"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			idler := &fakeIdler{pauseErr: tt.pauseErr}
			res, _, get := idleRouter(t, holdTunnel(t, nil), Policy{IdleAfter: after, IdleAction: tt.action}, idler)
			if r := get("/"); r.status != 200 {
				t.Fatalf("first request: %d %q", r.status, r.body)
			}
			last := time.Now()
			testwait.Until(t, "the idle action", func() bool { c, _ := idler.callLog(); return len(c) == len(tt.want) })
			calls, at := idler.callLog()
			if !slices.Equal(calls, tt.want) {
				t.Errorf("calls %v, want %v", calls, tt.want)
			}
			if idle := at[0].Sub(last); idle < after {
				t.Errorf("put away after %s of idleness, want at least %s", idle, after)
			}
			// The next request finds the actor away and resumes it.
			if r := get("/"); r.status != 200 || r.activation != "resumed" {
				t.Errorf("request after the idle action: %d %q, want 200 resumed", r.status, r.activation)
			}
			if n := res.resumes.Load(); n != 1 {
				t.Errorf("Resume called %d times, want 1", n)
			}
		})
	}
}

// TestActivityReportedBeforePutAway: with periodic reports far apart, an
// idle actor's last activity is still recorded before it is put away, so
// its record never shows it paused without it.
func TestActivityReportedBeforePutAway(t *testing.T) {
	idler := &fakeIdler{}
	p := Policy{IdleAfter: 100 * time.Millisecond, IdleAction: checkpoint.Pause}
	tunnel := holdTunnel(t, nil)
	res := warmResolver(t, tunnel, p)
	cfg := Config{Idler: idler, Activity: idler, IdleCheckInterval: 10 * time.Millisecond, ActivityInterval: time.Hour}
	srv, h := newRouter(t, cfg, res)
	startLoop(t, h)
	if r := get(t, srv, "app.default.actors.localhost", "/", nil); r.status != 200 {
		t.Fatalf("request: %d %q", r.status, r.body)
	}
	served := time.Now()
	testwait.Until(t, "the idle action", func() bool { c, _ := idler.callLog(); return len(c) == 1 })
	idler.mu.Lock()
	before := idler.reportedBefore[0]
	idler.mu.Unlock()
	acts := idler.reports()
	if before != 1 || len(acts) != 1 || acts[0].Actor.String() != "default/app" || acts[0].Last.After(served) {
		t.Fatalf("reports before the pause: %d of %v; want the request's activity, reported first", before, acts)
	}
}

// TestOpenStreamKeepsActorAwake: a request in flight (here a stream held
// open several times idle.after) is activity; the actor is put away only
// idle.after once it ends.
func TestOpenStreamKeepsActorAwake(t *testing.T) {
	const after = 100 * time.Millisecond
	release := make(chan struct{})
	idler := &fakeIdler{}
	_, h, get := idleRouter(t, holdTunnel(t, release), Policy{IdleAfter: after, IdleAction: checkpoint.Suspend}, idler)
	streamed := make(chan reply, 1)
	go func() { streamed <- get("/hold") }()
	testwait.Until(t, "the stream to open", func() bool { return h.InFlight() == 1 })
	open := time.Now()
	// Idle checks run every 10ms; none may act while the stream is open.
	testwait.Until(t, "4×idle.after with the stream open", func() bool { return time.Since(open) > 4*after })
	if calls, _ := idler.callLog(); len(calls) != 0 {
		t.Fatalf("actor put away with a stream open: %v", calls)
	}
	close(release)
	if r := <-streamed; r.status != 200 || r.body != "open\ndone\n" {
		t.Fatalf("stream: %d %q %v", r.status, r.body, r.err)
	}
	ended := time.Now()
	testwait.Until(t, "the idle action", func() bool { c, _ := idler.callLog(); return len(c) == 1 })
	if _, at := idler.callLog(); at[0].Sub(ended) < after {
		t.Errorf("put away %s after the stream ended, want at least %s", at[0].Sub(ended), after)
	}
}

// TestRequestDuringPutAwayWaitsForIt: a request that arrives while the
// router is suspending its actor waits for the suspend to finish, then
// resumes the actor, instead of racing the checkpoint.
func TestRequestDuringPutAwayWaitsForIt(t *testing.T) {
	idler := &fakeIdler{hold: make(chan struct{})}
	res, h, get := idleRouter(t, holdTunnel(t, nil), Policy{IdleAfter: 50 * time.Millisecond, IdleAction: checkpoint.Suspend}, idler)
	if r := get("/"); r.status != 200 {
		t.Fatalf("first request: %d %q", r.status, r.body)
	}
	testwait.Until(t, "the suspend to start", func() bool { c, _ := idler.callLog(); return len(c) == 1 })
	lookups := res.lookups.Load()
	during := make(chan reply, 1)
	go func() { during <- get("/") }()
	testwait.Until(t, "the request to park", func() bool { return h.act.flights.Waiting() == 1 })
	// A Lookup now would find the actor RUNNING on the worker it is
	// leaving; the request must be held until the suspend returns. Watch
	// for a while that nothing happens.
	select {
	case r := <-during:
		t.Fatalf("request answered during the suspend: %d %q", r.status, r.body)
	case <-time.After(100 * time.Millisecond):
	}
	if n := res.lookups.Load(); n != lookups {
		t.Fatalf("Lookup called %d times during the suspend", n-lookups)
	}
	close(idler.hold)
	if r := <-during; r.status != 200 || r.activation != "resumed" {
		t.Fatalf("request after the suspend: %d %q %q", r.status, r.activation, r.body)
	}
}

// TestActivityReports: traffic is reported once per change, an open
// stream at its start, and nothing while the actor is quiet.
func TestActivityReports(t *testing.T) {
	release := make(chan struct{})
	idler := &fakeIdler{}
	_, h, get := idleRouter(t, holdTunnel(t, release), Policy{}, idler)
	if r := get("/"); r.status != 200 {
		t.Fatalf("request: %d %q", r.status, r.body)
	}
	done := time.Now()
	testwait.Until(t, "a report", func() bool { return len(idler.reports()) == 1 })
	if a := idler.reports()[0]; a.Actor.String() != "default/app" || a.Last.Before(done.Add(-time.Second)) || a.Last.After(time.Now()) {
		t.Errorf("report %+v, want default/app at about %s", a, done)
	}
	// Quiet: several report intervals pass without another report.
	quiet := time.Now()
	testwait.Until(t, "5 report intervals", func() bool { return time.Since(quiet) > 100*time.Millisecond })
	if n := len(idler.reports()); n != 1 {
		t.Fatalf("%d reports without traffic, want 1", n)
	}
	streamed := make(chan reply, 1)
	go func() { streamed <- get("/hold") }()
	testwait.Until(t, "the stream to open", func() bool { return h.InFlight() == 1 })
	testwait.Until(t, "the stream's report", func() bool { return len(idler.reports()) == 2 })
	close(release)
	<-streamed
	testwait.Until(t, "the report of the stream's end", func() bool { return len(idler.reports()) == 3 })
}
