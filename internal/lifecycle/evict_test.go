package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/testwait"
)

// evictEnv is newEnv plus actors b..z of template tpl (or others), with
// the fake node reporting each start as fresh tunnel activity.
type evictEnv struct {
	*env
}

func newEvictEnv(t *testing.T) evictEnv {
	e := newEnv(t)
	e.node.onStart = func(req nodeapi.StartRequest) error {
		now := time.Now()
		e.node.setActivity(req.Worker, nodeapi.Activity{ActorUID: req.ActorUID, Started: now, Last: now})
		return nil
	}
	return evictEnv{e}
}

func (e evictEnv) addTemplate(t *testing.T, name string, spec *atev1.ActorTemplateSpec) {
	t.Helper()
	spec.Containers = []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}}
	must(t, e.st.CreateTemplate(context.Background(), &store.Template{Atespace: "default", Name: name, UID: name + "-uid",
		Phase: store.TemplateReady, GoldenSnapshot: name + "-uid/golden", ImageDigest: "sha256:" + name, Spec: spec}))
}

func (e evictEnv) addActor(t *testing.T, name, tpl string) {
	t.Helper()
	must(t, e.st.CreateActor(context.Background(), &store.Actor{Atespace: "default", Name: name, UID: name + "-uid",
		Template: tpl, Lifecycle: store.Lifecycle{State: store.Suspended}}))
}

func (e evictEnv) actor(t *testing.T, name string) *store.Actor {
	t.Helper()
	a, err := e.st.GetActor(context.Background(), key(name))
	must(t, err)
	return a
}

// served marks name's current incarnation as having answered a request
// at last, with inFlight requests open now.
func (e evictEnv) served(t *testing.T, name string, last time.Time, inFlight int) {
	t.Helper()
	e.streaming(t, name, last, inFlight, 0, 0)
}

// streaming is served with streams of the inFlight requests streams.
func (e evictEnv) streaming(t *testing.T, name string, last time.Time, inFlight, streams, listeners int) {
	t.Helper()
	a := e.actor(t, name)
	if a.Worker == "" {
		t.Errorf("%s holds no worker: %+v", name, a)
		return
	}
	e.node.setActivity(a.Worker, nodeapi.Activity{ActorUID: a.UID, Served: 1, InFlight: inFlight, Streams: streams, Listeners: listeners,
		Started: last.Add(-time.Second), Last: last})
}

func (e evictEnv) resume(t *testing.T, name string) Resumed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, r, err := e.m.ResumeEvicting(ctx, key(name))
	if err != nil {
		t.Fatalf("resume %s: %v", name, err)
	}
	return r
}

// waitQueued waits until n resumes are queued for a worker.
func (e evictEnv) waitQueued(t *testing.T, n int) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("%d resumes queued", n), func() bool {
		e.m.queue.mu.Lock()
		defer e.m.queue.mu.Unlock()
		return len(e.m.queue.waiters) == n
	})
}

func TestEvictsLeastRecentlyUsed(t *testing.T) {
	e := newEvictEnv(t)
	e.addActor(t, "b", "tpl")
	e.addActor(t, "c", "tpl")
	e.resume(t, "a")
	e.resume(t, "b")
	now := time.Now()
	e.served(t, "a", now.Add(-2*time.Second), 0)
	e.served(t, "b", now.Add(-time.Second), 0)
	worker := e.actor(t, "a").Worker

	r := e.resume(t, "c")
	if r.Evicted.String() != "default/a" {
		t.Fatalf("resume of c evicted %q, want default/a (least recently used)", r.Evicted)
	}
	a, c := e.actor(t, "a"), e.actor(t, "c")
	if a.State != store.Suspended || a.Reason != store.ReasonEvicted || a.EvictedFor.String() != "default/c" ||
		!strings.Contains(a.Message, "default/c") || a.Snapshot == "" {
		t.Fatalf("victim after eviction: %+v", a)
	}
	if c.State != store.Running || c.Worker != worker {
		t.Fatalf("c = %s on %q, want RUNNING on the victim's worker %s", c.State, c.Worker, worker)
	}
	if b := e.actor(t, "b"); b.State != store.Running {
		t.Fatalf("b was touched: %+v", b)
	}
}

func TestVictimChoice(t *testing.T) {
	for _, tc := range []struct {
		name string
		// aSpec is a's template (b's is tpl, the defaults); a is the
		// least recently used of the two.
		aSpec    *atev1.ActorTemplateSpec
		aFlight  int
		aStreams int
		// aListeners of aStreams are listening streams.
		aListeners int
		aFresh     bool // a has answered nothing since a resume just now
		// aUnserved: a has answered nothing since a resume this long ago.
		aUnserved time.Duration
		limits    EvictionLimits
		want      string
		aOutcome  store.ActorState
	}{
		{name: "lru", aSpec: &atev1.ActorTemplateSpec{}, want: "default/a", aOutcome: store.Suspended},
		{name: "in flight is never the victim", aSpec: &atev1.ActorTemplateSpec{}, aFlight: 1, want: "default/b"},
		{name: "open stream is never the victim by default", aSpec: &atev1.ActorTemplateSpec{}, aFlight: 1, aStreams: 1, want: "default/b"},
		{name: "open stream when allowed", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{AllowOpenStreams: true}},
			aFlight: 1, aStreams: 1, want: "default/a", aOutcome: store.Suspended},
		{name: "allowed streams do not cover other requests", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{AllowOpenStreams: true}},
			aFlight: 2, aStreams: 1, want: "default/b"},
		{name: "listening stream is activity by default", aSpec: &atev1.ActorTemplateSpec{}, aFlight: 1, aStreams: 1, aListeners: 1, want: "default/b"},
		{name: "listening stream ignored with streams.idle ignore", aSpec: &atev1.ActorTemplateSpec{Streams: &atev1.StreamPolicy{Idle: "ignore"}},
			aFlight: 1, aStreams: 1, aListeners: 1, want: "default/a", aOutcome: store.Suspended},
		{name: "ignored listeners do not cover other requests", aSpec: &atev1.ActorTemplateSpec{Streams: &atev1.StreamPolicy{Idle: "ignore"}},
			aFlight: 2, aStreams: 1, aListeners: 1, want: "default/b"},
		{name: "not evictable", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{Evictable: ptr(false)}}, want: "default/b"},
		{name: "higher priority stays", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{Priority: 5}}, want: "default/b"},
		{name: "lower priority goes first", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{Priority: -5}}, want: "default/a", aOutcome: store.Suspended},
		// A tenant cannot put its actor ahead of others' beyond the
		// operator's ceiling, nor pin more actors than its cap.
		{name: "priority above the ceiling is clamped", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{Priority: 5}},
			limits: EvictionLimits{MaxPriority: Limit{Set: true, Default: 0}}, want: "default/a", aOutcome: store.Suspended},
		{name: "priority within this atespace's ceiling", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{Priority: 5}},
			limits: EvictionLimits{MaxPriority: Limit{Set: true, Default: 0, ByAtespace: map[string]int{"default": 5}}}, want: "default/b"},
		{name: "pin beyond the cap does not hold", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{Evictable: ptr(false)}},
			limits: EvictionLimits{MaxPinned: Limit{Set: true, Default: 0}}, want: "default/a", aOutcome: store.Suspended},
		{name: "pin within the cap holds", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{Evictable: ptr(false)}},
			limits: EvictionLimits{MaxPinned: Limit{Set: true, Default: 1}}, want: "default/b"},
		{name: "pin beyond the cap still waits for its request", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{Evictable: ptr(false)}},
			aFlight: 1, limits: EvictionLimits{MaxPinned: Limit{Set: true, Default: 0}}, want: "default/b"},
		{name: "minimum run time protects a fresh actor", aSpec: &atev1.ActorTemplateSpec{}, aFresh: true, want: "default/b"},
		{name: "minimum run time 0", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{MinRunSeconds: ptr[int32](0)}},
			aFresh: true, want: "default/a", aOutcome: store.Suspended},
		// A long minRunSeconds holds a worker like evictable: false
		// does, so the pin cap bounds it; the default length never is.
		{name: "long minimum run time beyond the pin cap does not hold", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{MinRunSeconds: ptr[int32](86400)}},
			aUnserved: time.Minute, limits: EvictionLimits{MaxPinned: Limit{Set: true, Default: 0}}, want: "default/a", aOutcome: store.Suspended},
		{name: "long minimum run time within the pin cap holds", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{MinRunSeconds: ptr[int32](86400)}},
			aUnserved: time.Minute, limits: EvictionLimits{MaxPinned: Limit{Set: true, Default: 1}}, want: "default/b"},
		{name: "default minimum run time is not a pin", aSpec: &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{MinRunSeconds: ptr[int32](86400)}},
			aUnserved: 2 * time.Second, limits: EvictionLimits{MaxPinned: Limit{Set: true, Default: 0}}, want: "default/b"},
		{name: "idle action pause", aSpec: &atev1.ActorTemplateSpec{Idle: &atev1.IdlePolicy{After: "1h", Action: "pause"}},
			want: "default/a", aOutcome: store.Paused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEvictEnv(t)
			e.m.SetEvictionLimits(tc.limits)
			e.addTemplate(t, "atpl", tc.aSpec)
			must(t, e.st.DeleteActor(context.Background(), e.actor(t, "a")))
			e.addActor(t, "a", "atpl")
			e.addActor(t, "b", "tpl")
			e.addActor(t, "c", "tpl")
			e.resume(t, "a")
			e.resume(t, "b")
			now := time.Now()
			switch {
			case tc.aUnserved > 0:
				w := e.actor(t, "a")
				e.node.setActivity(w.Worker, nodeapi.Activity{ActorUID: w.UID, Started: now.Add(-tc.aUnserved), Last: now.Add(-tc.aUnserved)})
			case !tc.aFresh:
				e.streaming(t, "a", now.Add(-2*time.Second), tc.aFlight, tc.aStreams, tc.aListeners)
			}
			// b was active after a, whose resume (fresh or not) came first.
			e.served(t, "b", now, 0)
			if r := e.resume(t, "c"); r.Evicted.String() != tc.want {
				t.Fatalf("evicted %q, want %q", r.Evicted, tc.want)
			}
			if tc.aOutcome != "" {
				if a := e.actor(t, "a"); a.State != tc.aOutcome || a.Reason != store.ReasonEvicted {
					t.Fatalf("a = %s (%s), want %s evicted", a.State, a.Reason, tc.aOutcome)
				}
			} else if a := e.actor(t, "a"); a.State != store.Running {
				t.Fatalf("a was evicted: %+v", a)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// newBusyEnv: a and b hold both workers, each with a request in flight
// (so neither may be evicted); c is SUSPENDED.
func newBusyEnv(t *testing.T) evictEnv {
	t.Helper()
	e := newEvictEnv(t)
	e.addActor(t, "b", "tpl")
	e.addActor(t, "c", "tpl")
	e.resume(t, "a")
	e.resume(t, "b")
	now := time.Now()
	e.served(t, "a", now, 1)
	e.served(t, "b", now, 1)
	return e
}

func TestEveryActorBusyWaitsForDeadline(t *testing.T) {
	e := newBusyEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	_, err := e.m.Resume(ctx, key("c"))
	if !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("Resume with every actor busy = %v, want ErrNoCapacity", err)
	}
	for _, n := range []string{"a", "b"} {
		if a := e.actor(t, n); a.State != store.Running {
			t.Fatalf("busy %s was evicted: %+v", n, a)
		}
	}
	if c := e.actor(t, "c"); c.State != store.Suspended || c.Worker != "" {
		t.Fatalf("c after giving up: %+v", c)
	}
	// Once a's request ends, the next resume evicts it.
	e.served(t, "a", time.Now(), 0)
	if r := e.resume(t, "c"); r.Evicted.String() != "default/a" {
		t.Fatalf("evicted %q, want default/a once idle", r.Evicted)
	}
}

// TestWaitersServedInArrivalOrder: with one worker held by a busy actor,
// resumes queued as a, b, c, d get the worker in that order, however the
// workers free up.
func TestWaitersServedInArrivalOrder(t *testing.T) {
	e := newEvictEnv(t)
	// One worker only.
	must(t, e.st.DeleteWorker(context.Background(), "w1"))
	e.addActor(t, "x", "tpl")
	for _, n := range []string{"b", "c", "d"} {
		e.addActor(t, n, "tpl")
	}
	e.resume(t, "x")
	e.served(t, "x", time.Now(), 1) // busy: no victim yet

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i, n := range []string{"a", "b", "c", "d"} {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := e.m.Resume(ctx, key(n)); err != nil {
				t.Errorf("resume %s: %v", n, err)
				return
			}
			mu.Lock()
			order = append(order, n)
			mu.Unlock()
			// Answer one request, then idle: the next waiter may evict it.
			e.served(t, n, time.Now(), 0)
		})
		e.waitQueued(t, i+1)
	}
	e.served(t, "x", time.Now(), 0) // x's request ends
	wg.Wait()
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(order, want) {
		t.Fatalf("served in order %v, want arrival order %v", order, want)
	}
}

// TestRejoinKeepsPlace: a waiter that gives up and comes back at once (the
// router retrying a shared resume that ran out of time) keeps its place
// ahead of later arrivals.
func TestRejoinKeepsPlace(t *testing.T) {
	var q queue
	a := q.join(key("a"), nil)
	q.join(key("b"), nil)
	q.leave(a)
	a2 := q.join(key("a"), nil)
	c := q.join(key("c"), nil)
	var got []string
	for _, w := range q.waiters {
		got = append(got, w.actor.String())
	}
	if want := []string{"default/a", "default/b", "default/c"}; !slices.Equal(got, want) {
		t.Fatalf("queue %v, want %v", got, want)
	}
	if a2.seq >= c.seq {
		t.Fatalf("rejoined seq %d not before later arrival's %d", a2.seq, c.seq)
	}
}

func TestFailedEvictionNotRetriedAtOnce(t *testing.T) {
	e := newEvictEnv(t)
	e.addActor(t, "b", "tpl")
	e.resume(t, "a")
	e.resume(t, "b")
	now := time.Now()
	e.served(t, "a", now.Add(-2*time.Second), 0)
	e.served(t, "b", now.Add(-time.Second), 0)
	e.m.queue.mu.Lock()
	e.m.queue.failed = map[names.ActorKey]time.Time{key("a"): now}
	e.m.queue.mu.Unlock()
	ws, err := e.st.ListWorkers(context.Background())
	must(t, err)
	var got []string
	for _, c := range e.m.candidates(context.Background(), ws) {
		got = append(got, c.actor.Key().String())
	}
	if want := []string{"default/b"}; !slices.Equal(got, want) {
		t.Fatalf("candidates %v, want %v (a's eviction just failed)", got, want)
	}
}

func TestEvictionWithSelectors(t *testing.T) {
	e := newEvictEnv(t)
	ctx := context.Background()
	// w0 is a gpu worker, w1 not; c can run only on gpu.
	must(t, e.st.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n1", Labels: map[string]string{"gpu": "yes"}}))
	e.addActor(t, "b", "tpl")
	must(t, e.st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: "c", UID: "c-uid", Template: "tpl",
		Lifecycle: store.Lifecycle{State: store.Suspended}, WorkerSelector: map[string]string{"gpu": "yes"}}))
	e.resume(t, "a")
	e.resume(t, "b")
	onGPU := "a"
	if e.actor(t, "b").Worker == "w0" {
		onGPU = "b"
	}
	other := map[string]string{"a": "b", "b": "a"}[onGPU]
	now := time.Now()
	// The actor on the plain worker is the least recently used; c cannot
	// use its worker, so the gpu one's actor goes.
	e.served(t, other, now.Add(-time.Minute), 0)
	e.served(t, onGPU, now, 0)
	if r := e.resume(t, "c"); r.Evicted.String() != fmt.Sprintf("default/%s", onGPU) {
		t.Fatalf("evicted %q, want default/%s (the only matching worker)", r.Evicted, onGPU)
	}
	if c := e.actor(t, "c"); c.Worker != "w0" {
		t.Fatalf("c on %q, want w0", c.Worker)
	}
}

// TestEvictionMessageNamesOnlyItsAtespace: the evicted actor's message
// is its tenant's to read: it names the actor the eviction made room for
// only when that actor is of the same atespace.
func TestEvictionMessageNamesOnlyItsAtespace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		forActor names.ActorKey
		want     string
	}{
		{"same atespace", names.ActorKey{Atespace: "team-a", Name: "web"}, "suspended to make room for team-a/web (evicted: least recently used idle actor)"},
		{"another atespace", names.ActorKey{Atespace: "team-b", Name: "secret"}, "suspended to make room for an actor of another atespace (evicted: least recently used idle actor)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := Why{Reason: store.ReasonEvicted, EvictedFor: tc.forActor}
			if got := w.message("suspended", "", "team-a"); got != tc.want {
				t.Errorf("message %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPinCapKeepsMostRecent: with a cap of one pinned actor per
// atespace, a tenant pinning two keeps the most recently active one; the
// other is evicted for a waiting actor as if it were not pinned.
func TestPinCapKeepsMostRecent(t *testing.T) {
	e := newEvictEnv(t)
	e.m.SetEvictionLimits(EvictionLimits{MaxPinned: Limit{Set: true, Default: 1}})
	e.addTemplate(t, "pinned", &atev1.ActorTemplateSpec{Eviction: &atev1.EvictionPolicy{Evictable: ptr(false)}})
	must(t, e.st.DeleteActor(context.Background(), e.actor(t, "a")))
	e.addActor(t, "a", "pinned")
	e.addActor(t, "b", "pinned")
	e.addActor(t, "c", "tpl")
	e.resume(t, "a")
	e.resume(t, "b")
	now := time.Now()
	e.served(t, "a", now.Add(-2*time.Second), 0)
	e.served(t, "b", now.Add(-time.Second), 0)
	if r := e.resume(t, "c"); r.Evicted.String() != "default/a" {
		t.Fatalf("evicted %q, want default/a (pinned beyond the cap, least recently active)", r.Evicted)
	}
	if b := e.actor(t, "b"); b.State != store.Running {
		t.Fatalf("b, pinned within the cap, was evicted: %+v", b)
	}
}

// TestWaitingResumeOutlivesActivityWrites: a resume waiting for a worker
// keeps its claim when, meanwhile, its actor's record changes in a field
// the workflows do not own (the router records last activity): it gets
// the worker the eviction freed for it and names the evicted actor,
// instead of failing with a conflict and leaving both to a retry.
func TestWaitingResumeOutlivesActivityWrites(t *testing.T) {
	e := newBusyEnv(t)
	type result struct {
		r   Resumed
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, r, err := e.m.ResumeEvicting(ctx, key("c"))
		done <- result{r, err}
	}()
	e.waitQueued(t, 1)
	c := e.actor(t, "c")
	c.LastActivity = time.Now().UTC()
	if _, err := e.st.UpdateActor(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	e.served(t, "a", time.Now(), 0) // a's request ends: it may go
	e.m.kick()
	res := <-done
	if res.err != nil {
		t.Fatalf("waiting resume of c: %v, want it to take the worker freed for it", res.err)
	}
	if res.r.Evicted.String() != "default/a" {
		t.Fatalf("resume of c evicted %q, want default/a", res.r.Evicted)
	}
	if got := e.actor(t, "c"); got.State != store.Running || got.LastActivity.IsZero() {
		t.Fatalf("c after its resume: %+v", got)
	}
}
