package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

func TestParseTTL(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"", 0, false},
		{"1s", time.Second, false},
		{"2s", 2 * time.Second, false},
		{"36h", 36 * time.Hour, false},
		{"14d", 14 * 24 * time.Hour, false},
		{"1h30m", 90 * time.Minute, false},
		{"999ms", 0, true}, // below MinTTL
		{"0", 0, true},     // use absent for never
		{"0d", 0, true},
		{"-1h", 0, true},
		{"-3d", 0, true},
		{"1.5d", 0, true},
		{"d", 0, true},
		{"ten days", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTTL(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ParseTTL(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestExpiredFor(t *testing.T) {
	now := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	ttl := time.Hour
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for _, tc := range []struct {
		name string
		a    store.Actor
		ttl  time.Duration
		want bool
		idle time.Duration
	}{
		{"suspended past ttl", store.Actor{Lifecycle: store.Lifecycle{State: store.Suspended}, StateTime: ago(2 * time.Hour)}, ttl, true, 2 * time.Hour},
		{"crashed past ttl", store.Actor{Lifecycle: store.Lifecycle{State: store.Crashed}, StateTime: ago(2 * time.Hour)}, ttl, true, 2 * time.Hour},
		{"exactly ttl", store.Actor{Lifecycle: store.Lifecycle{State: store.Suspended}, StateTime: ago(time.Hour)}, ttl, true, time.Hour},
		{"recent activity wins", store.Actor{Lifecycle: store.Lifecycle{State: store.Suspended}, StateTime: ago(5 * time.Hour), LastActivity: ago(time.Minute)}, ttl, false, time.Minute},
		{"recent state change wins", store.Actor{Lifecycle: store.Lifecycle{State: store.Suspended}, StateTime: ago(time.Minute), LastActivity: ago(5 * time.Hour)}, ttl, false, time.Minute},
		{"new, no state time", store.Actor{Lifecycle: store.Lifecycle{State: store.Suspended}, CreateTime: ago(time.Minute)}, ttl, false, time.Minute},
		{"no ttl", store.Actor{Lifecycle: store.Lifecycle{State: store.Suspended}, StateTime: ago(1000 * time.Hour)}, 0, false, 1000 * time.Hour},
		{"running", store.Actor{Lifecycle: store.Lifecycle{State: store.Running, Worker: "w0"}, StateTime: ago(2 * time.Hour)}, ttl, false, 2 * time.Hour},
		{"paused", store.Actor{Lifecycle: store.Lifecycle{State: store.Paused, PausedSnapshot: "p", Node: "n1"}, StateTime: ago(2 * time.Hour)}, ttl, false, 2 * time.Hour},
		{"suspending", store.Actor{Lifecycle: store.Lifecycle{State: store.Suspending, Worker: "w0"}, StateTime: ago(2 * time.Hour)}, ttl, false, 2 * time.Hour},
		{"deleting", store.Actor{Lifecycle: store.Lifecycle{State: store.Deleting}, StateTime: ago(2 * time.Hour)}, ttl, false, 2 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idle, got := ExpiredFor(&tc.a, tc.ttl, now)
			if got != tc.want || idle != tc.idle {
				t.Fatalf("ExpiredFor = %v, %v; want %v, %v", idle, got, tc.idle, tc.want)
			}
		})
	}
}

// TestSweepExpired: one pass deletes, with their snapshots, exactly the
// SUSPENDED and CRASHED actors of a template with a ttl that were unused
// for it, and nothing else.
func TestSweepExpired(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	must(t, e.st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "ttl", UID: "ttl-uid", Phase: store.TemplateReady,
		Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}},
			Ttl: &atev1.TTLPolicy{DeleteAfterIdle: "1h"}}}))
	start := time.Now().UTC()
	mk := func(name, tpl string, l store.Lifecycle, activity time.Time) {
		t.Helper()
		st, err := e.snaps.Stage(name+"-uid", "")
		must(t, err)
		ref, err := e.snaps.Commit(ctx, st, snapshot.ScopeFull)
		must(t, err)
		l.Snapshot = ref
		must(t, e.st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: name, UID: name + "-uid", Template: tpl,
			Lifecycle: l, StateTime: start, LastActivity: activity}))
	}
	mk("old", "ttl", store.Lifecycle{State: store.Suspended}, time.Time{})
	mk("crashed", "ttl", store.Lifecycle{State: store.Crashed}, time.Time{})
	mk("used", "ttl", store.Lifecycle{State: store.Suspended}, start.Add(90*time.Minute))
	mk("paused", "ttl", store.Lifecycle{State: store.Paused, PausedSnapshot: "p", Node: "n1"}, time.Time{})
	mk("forever", "tpl", store.Lifecycle{State: store.Suspended}, time.Time{})

	// Two hours on, "used" was active 30 minutes ago.
	n, err := e.m.SweepExpired(ctx, start.Add(2*time.Hour))
	must(t, err)
	if n != 2 {
		t.Fatalf("deleted %d actors, want 2 (old, crashed)", n)
	}
	for name, gone := range map[string]bool{"old": true, "crashed": true, "used": false, "paused": false, "forever": false, "a": false} {
		_, err := e.st.GetActor(ctx, key(name))
		if gotGone := errors.Is(err, store.ErrNotFound); gotGone != gone {
			t.Errorf("actor %s: gone = %v (err %v), want %v", name, gotGone, err, gone)
		}
	}
	refs, err := e.snaps.List(ctx)
	must(t, err)
	for _, ref := range refs {
		for _, uid := range []string{"old-uid/", "crashed-uid/"} {
			if len(ref) > len(uid) && ref[:len(uid)] == uid {
				t.Errorf("snapshot %s of an expired actor is left", ref)
			}
		}
	}
	if len(refs) != 3 {
		t.Errorf("snapshots left %v, want those of used, paused and forever", refs)
	}
	// Nothing more to do: a second pass deletes nothing.
	if n, err := e.m.SweepExpired(ctx, start.Add(2*time.Hour)); err != nil || n != 0 {
		t.Fatalf("second pass = %d, %v; want 0", n, err)
	}
}

// TestSweepExpiredIsBounded: a pass deletes at most expiryDeletes, and
// the next passes go on until every expired actor is gone.
func TestSweepExpiredIsBounded(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	must(t, e.st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "ttl", UID: "ttl-uid", Phase: store.TemplateReady,
		Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}},
			Ttl: &atev1.TTLPolicy{DeleteAfterIdle: "1s"}}}))
	total := expiryDeletes + 30
	for i := range total {
		must(t, e.st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: fmt.Sprintf("x%03d", i), UID: fmt.Sprintf("x%03d-uid", i),
			Template: "ttl", Lifecycle: store.Lifecycle{State: store.Suspended}, StateTime: time.Now().UTC()}))
	}
	later := time.Now().Add(time.Minute)
	first, err := e.m.SweepExpired(ctx, later)
	must(t, err)
	if first != expiryDeletes {
		t.Fatalf("first pass deleted %d, want the bound %d", first, expiryDeletes)
	}
	second, err := e.m.SweepExpired(ctx, later)
	must(t, err)
	if first+second != total {
		t.Fatalf("two passes deleted %d+%d, want %d", first, second, total)
	}
}

// TestSweepSkipsBusyActors: an actor a workflow holds (a resume racing
// the sweep) is in use; the sweep passes it by instead of waiting.
func TestSweepSkipsBusyActors(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	must(t, e.st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "ttl", UID: "ttl-uid", Phase: store.TemplateReady,
		Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}},
			Ttl: &atev1.TTLPolicy{DeleteAfterIdle: "1h"}}}))
	a := &store.Actor{Atespace: "default", Name: "b", UID: "b-uid", Template: "ttl",
		Lifecycle: store.Lifecycle{State: store.Suspended}, StateTime: time.Now().UTC()}
	must(t, e.st.CreateActor(ctx, a))
	// A resume holds the actor: the sweep skips it rather than wait.
	unlock, ok := e.m.locks.tryLock(a.Key())
	if !ok {
		t.Fatal("lock")
	}
	n, err := e.m.SweepExpired(ctx, time.Now().Add(2*time.Hour))
	unlock()
	must(t, err)
	if n != 0 {
		t.Fatalf("sweep deleted an actor a workflow held")
	}
	if _, err := e.st.GetActor(ctx, a.Key()); err != nil {
		t.Fatalf("held actor: %v", err)
	}
}

// TestSweepRacesResume: a resume and a sweep started together end with
// one of them having won whole: either the actor was deleted (its
// snapshots gone, the resume saw NotFound, no worker claimed) or it is
// RUNNING on a worker and kept.
func TestSweepRacesResume(t *testing.T) {
	for i := range 20 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			must(t, e.st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "ttl", UID: "ttl-uid", Phase: store.TemplateReady,
				GoldenSnapshot: "ttl-uid/golden",
				Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}},
					Ttl: &atev1.TTLPolicy{DeleteAfterIdle: "1s"}}}))
			must(t, e.st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: "r", UID: "r-uid", Template: "ttl",
				Lifecycle: store.Lifecycle{State: store.Suspended}, StateTime: time.Now().UTC()}))
			later := time.Now().Add(time.Minute)
			resumed := make(chan error, 1)
			go func() {
				_, err := e.m.Resume(ctx, key("r"))
				resumed <- err
			}()
			deleted, err := e.m.SweepExpired(ctx, later)
			must(t, err)
			rerr := <-resumed
			a, gerr := e.st.GetActor(ctx, key("r"))
			t.Logf("sweep deleted %d", deleted)
			switch {
			case deleted == 1:
				if !errors.Is(gerr, store.ErrNotFound) || !errors.Is(rerr, store.ErrNotFound) {
					t.Fatalf("sweep won but actor read %v, resume %v; want both NotFound", gerr, rerr)
				}
				if n := e.claimedWorkers(t); n != 0 {
					t.Fatalf("%d workers claimed after the sweep won", n)
				}
			case deleted == 0:
				must(t, gerr)
				if rerr != nil || a.State != store.Running || a.Worker == "" {
					t.Fatalf("resume won but resume %v, actor %s on %q", rerr, a.State, a.Worker)
				}
			default:
				t.Fatalf("deleted %d", deleted)
			}
		})
	}
}

// TestSweepReplicas: two API servers' managers sweeping one store at
// once delete every expired actor exactly once between them.
func TestSweepReplicas(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	other := New(e.st, testNodes{n: e.node, live: []string{"n1"}}, e.snaps, "other", nil)
	t.Cleanup(other.Close)
	must(t, e.st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "ttl", UID: "ttl-uid", Phase: store.TemplateReady,
		Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}},
			Ttl: &atev1.TTLPolicy{DeleteAfterIdle: "1s"}}}))
	const total = 60
	for i := range total {
		must(t, e.st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: fmt.Sprintf("x%02d", i), UID: fmt.Sprintf("x%02d-uid", i),
			Template: "ttl", Lifecycle: store.Lifecycle{State: store.Suspended}, StateTime: time.Now().UTC()}))
	}
	later := time.Now().Add(time.Minute)
	counts := make(chan int, 2)
	for _, m := range []*Manager{e.m, other} {
		go func() {
			n, err := m.SweepExpired(ctx, later)
			if err != nil {
				t.Error(err)
			}
			counts <- n
		}()
	}
	a, b := <-counts, <-counts
	if a+b != total {
		t.Fatalf("replicas deleted %d + %d, want %d in all", a, b, total)
	}
	page, _, err := e.st.ListActors(ctx, "default", 1000, "")
	must(t, err)
	if len(page) != 1 || page[0].Name != "a" {
		t.Fatalf("actors left: %d, want only a (no ttl)", len(page))
	}
}
