// Package storetest is the conformance suite every store.Store backend
// passes: call Run from the backend's tests with a constructor of empty
// stores.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/testwait"
)

// Run runs the suite; newStore returns an empty store that the suite closes.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Atespaces", testAtespaces},
		{"Templates", testTemplates},
		{"ActorCAS", testActorCAS},
		{"MoveTemplate", testMoveTemplate},
		{"ListActorsPages", testListActorsPages},
		{"ClaimWorker", testClaimWorker},
		{"ClaimWorkerConcurrent", testClaimWorkerConcurrent},
		{"ClaimWorkerPrefers", testClaimWorkerPrefers},
		{"Leases", testLeases},
		{"TakeOverLease", testTakeOverLease},
		{"WorkerInvariant", testWorkerInvariant},
		{"NodeScopedClaim", testNodeScopedClaim},
		{"RecordActivity", testRecordActivity},
		{"AnyString", testAnyString},
		{"FencedWrites", testFencedWrites},
		{"FenceExpired", testFenceExpired},
		{"FenceTakenOver", testFenceTakenOver},
		{"RenewLease", testRenewLease},
		{"ClaimManyConcurrent", testClaimManyConcurrent},
		{"Alarms", testAlarms},
		{"AlarmLimitConcurrent", testAlarmLimitConcurrent},
		{"AlarmsGoWithActor", testAlarmsGoWithActor},
		{"Tags", testTags},
		{"Events", testEvents},
		{"EventsConcurrent", testEventsConcurrent},
		{"EventsBatch", testEventsBatch},
		{"CountActors", testCountActors},
		{"ActorLabels", testActorLabels},
		{"SigningKeys", testSigningKeys},
		{"SigningKeysConcurrent", testSigningKeysConcurrent},
		{"IngressTokens", testIngressTokens},
		{"RoleBindings", testRoleBindings},
		{"NodeDrains", testNodeDrains},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want %v", err, target)
	}
}

// seed creates atespace "default" with template "tpl".
func seed(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	must(t, s.CreateAtespace(ctx, &store.Atespace{Name: "default", UID: "ns-1"}))
	must(t, s.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl", UID: "t-1",
		Phase: store.TemplateBuilding, Spec: seedSpec()}))
}

// seedSpec is seed's template spec.
func seedSpec() *atev1.ActorTemplateSpec {
	return &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}}}
}

func newActor(t *testing.T, s store.Store, name string, selector map[string]string) *store.Actor {
	t.Helper()
	a := &store.Actor{Atespace: "default", Name: name, UID: "uid-" + name, Template: "tpl", Lifecycle: store.Lifecycle{State: store.Suspended}, WorkerSelector: selector}
	must(t, s.CreateActor(context.Background(), a))
	return a
}

func testAtespaces(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	wantErr(t, s.CreateAtespace(ctx, &store.Atespace{Name: "default"}), store.ErrAlreadyExists)
	_, err := s.GetAtespace(ctx, "nope")
	wantErr(t, err, store.ErrNotFound)
	wantErr(t, s.DeleteAtespace(ctx, "default"), store.ErrNotEmpty)
	must(t, s.CreateAtespace(ctx, &store.Atespace{Name: "empty"}))
	list, err := s.ListAtespaces(ctx)
	must(t, err)
	if len(list) != 2 {
		t.Fatalf("ListAtespaces = %d, want 2", len(list))
	}
	must(t, s.DeleteAtespace(ctx, "empty"))
	wantErr(t, s.DeleteAtespace(ctx, "empty"), store.ErrNotFound)
}

func testTemplates(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	tpl, err := s.GetTemplate(ctx, "default", "tpl")
	must(t, err)
	if got := tpl.Spec.GetContainers()[0].GetImage(); got != "oci:/x" {
		t.Fatalf("spec image = %q", got)
	}
	wantErr(t, s.CreateTemplate(ctx, &store.Template{Atespace: "missing", Name: "x", Spec: tpl.Spec}), store.ErrNotFound)
	building := []atev1.BuildPhase{atev1.BuildPhase_IMAGE, atev1.BuildPhase_BOOT}
	tpl.Message, tpl.BuildPhases = "pulling and unpacking the image; booting the sandbox", building
	upd, err := s.UpdateTemplateStatus(ctx, tpl)
	must(t, err)
	if got, err := s.GetTemplate(ctx, "default", "tpl"); err != nil || !slices.Equal(got.BuildPhases, building) || got.Message != tpl.Message {
		t.Fatalf("template while building = %+v (%v), want phases %v", got, err, building)
	}
	tpl = upd
	tpl.Phase, tpl.GoldenSnapshot, tpl.Message, tpl.BuildPhases = store.TemplateReady, "snap-1", "", nil
	upd, err = s.UpdateTemplateStatus(ctx, tpl)
	must(t, err)
	if upd.Version != tpl.Version+1 || upd.Phase != store.TemplateReady || upd.BuildPhases != nil {
		t.Fatalf("updated template = %+v", upd)
	}
	if got, err := s.GetTemplate(ctx, "default", "tpl"); err != nil || got.BuildPhases != nil || got.GoldenSnapshot != "snap-1" {
		t.Fatalf("template when ready = %+v (%v), want no phases", got, err)
	}
	_, err = s.UpdateTemplateStatus(ctx, tpl) // stale version
	wantErr(t, err, store.ErrConflict)
	newActor(t, s, "a", nil)
	wantErr(t, s.DeleteTemplate(ctx, "default", "tpl"), store.ErrNotEmpty)
}

func testActorCAS(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	a := newActor(t, s, "a", nil)
	wantErr(t, s.CreateActor(ctx, a), store.ErrAlreadyExists)
	wantErr(t, s.CreateActor(ctx, &store.Actor{Atespace: "default", Name: "b", Template: "nope"}), store.ErrNotFound)
	b := *a
	b.Message = "first"
	upd, err := s.UpdateActor(ctx, &b)
	must(t, err)
	if upd.Version != a.Version+1 {
		t.Fatalf("version = %d, want %d", upd.Version, a.Version+1)
	}
	c := *a // stale: late finisher must not overwrite
	c.Message = "late"
	_, err = s.UpdateActor(ctx, &c)
	wantErr(t, err, store.ErrConflict)
	other := *upd
	other.UID = "someone-else"
	_, err = s.UpdateActor(ctx, &other)
	wantErr(t, err, store.ErrConflict)
	got, err := s.GetActor(ctx, names.ActorKey{Atespace: "default", Name: "a"})
	must(t, err)
	if got.Message != "first" {
		t.Fatalf("message = %q, want first", got.Message)
	}
	wantErr(t, s.DeleteActor(ctx, a), store.ErrConflict)
	must(t, s.DeleteActor(ctx, got))
	_, err = s.GetActor(ctx, names.ActorKey{Atespace: "default", Name: "a"})
	wantErr(t, err, store.ErrNotFound)
}

func testListActorsPages(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	must(t, s.CreateAtespace(ctx, &store.Atespace{Name: "other"}))
	for i := range 7 {
		newActor(t, s, fmt.Sprintf("a%02d", i), nil)
	}
	var names []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
		page, next, err := s.ListActors(ctx, "default", 3, token)
		must(t, err)
		for _, a := range page {
			names = append(names, a.Name)
		}
		if next == "" {
			break
		}
		token = next
	}
	if fmt.Sprint(names) != "[a00 a01 a02 a03 a04 a05 a06]" {
		t.Fatalf("paged names = %v", names)
	}
	if page, _, err := s.ListActors(ctx, "other", 3, ""); err != nil || len(page) != 0 {
		t.Fatalf("other atespace = %v, %v", page, err)
	}
	if _, _, err := s.ListActors(ctx, "default", 3, "!!"); err == nil {
		t.Fatal("bad page token accepted")
	}
}

// testClaimWorkerPrefers: preferred workers are taken first, in order,
// skipping those that are unknown, taken, on another node or not
// matching; with none of them free the claim falls back to any worker.
func testClaimWorkerPrefers(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	for _, w := range []*store.Worker{
		{Name: "w0", Node: "n"}, {Name: "w1", Node: "n"}, {Name: "w2", Node: "n"},
		{Name: "w3", Node: "other"}, {Name: "w4", Node: "n", Labels: map[string]string{"pool": "gpu"}},
	} {
		must(t, s.PutWorker(ctx, w))
	}
	claim := func(name, node string, prefer ...string) string {
		t.Helper()
		_, w, err := s.ClaimWorker(ctx, newActor(t, s, name, nil), node, prefer...)
		must(t, err)
		return w.Name
	}
	if got := claim("a", "n", "nope", "w3", "w2", "w1"); got != "w2" {
		t.Fatalf("claim preferring [nope w3 w2 w1] on n got %s, want w2", got)
	}
	if got := claim("b", "n", "w2", "w1"); got != "w1" {
		t.Fatalf("claim preferring [w2 (taken) w1] got %s, want w1", got)
	}
	sel := newActor(t, s, "c", map[string]string{"pool": "cpu"})
	if _, _, err := s.ClaimWorker(ctx, sel, "", "w4"); !errors.Is(err, store.ErrNoFreeWorker) {
		t.Fatalf("claim for pool=cpu preferring w4 (pool=gpu), only w0 and w3 free and unlabeled: err = %v, want ErrNoFreeWorker", err)
	}
	if got := claim("d", "", "w2"); got != "w0" {
		t.Fatalf("claim preferring a taken worker got %s, want the first free, w0", got)
	}
}

func testClaimWorker(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	must(t, s.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n", Labels: map[string]string{"pool": "a"}}))
	must(t, s.PutWorker(ctx, &store.Worker{Name: "w1", Node: "n", Labels: map[string]string{"pool": "b"}}))
	a := newActor(t, s, "a", map[string]string{"pool": "b"})
	ra, w, err := s.ClaimWorker(ctx, a, "")
	must(t, err)
	if w.Name != "w1" || ra.State != store.Resuming || ra.Worker != "w1" || w.ActorUID != a.UID {
		t.Fatalf("claim = %+v %+v", ra, w)
	}
	_, _, err = s.ClaimWorker(ctx, a, "") // stale version
	wantErr(t, err, store.ErrConflict)
	b := newActor(t, s, "b", map[string]string{"pool": "b"})
	_, _, err = s.ClaimWorker(ctx, b, "")
	wantErr(t, err, store.ErrNoFreeWorker)
	// Re-registering a claimed worker keeps its assignment.
	must(t, s.PutWorker(ctx, &store.Worker{Name: "w1", Node: "n", Labels: map[string]string{"pool": "b"}}))
	_, _, err = s.ClaimWorker(ctx, b, "")
	wantErr(t, err, store.ErrNoFreeWorker)
	// Clearing Worker in an update frees it.
	ra.State, ra.Worker = store.Suspended, ""
	_, err = s.UpdateActor(ctx, ra)
	must(t, err)
	_, w, err = s.ClaimWorker(ctx, b, "")
	must(t, err)
	if w.Name != "w1" {
		t.Fatalf("b claimed %s, want w1", w.Name)
	}
	// Release by a non-holder is a no-op; by the holder frees.
	must(t, s.ReleaseWorker(ctx, "w1", a.UID))
	if got, _ := s.GetWorker(ctx, "w1"); got.ActorUID != b.UID {
		t.Fatalf("w1 holder = %q, want %q", got.ActorUID, b.UID)
	}
	must(t, s.ReleaseWorker(ctx, "w1", b.UID))
	if got, _ := s.GetWorker(ctx, "w1"); !got.Free() {
		t.Fatal("w1 not free after release")
	}
}

func testClaimWorkerConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	for i := range 3 {
		must(t, s.PutWorker(ctx, &store.Worker{Name: fmt.Sprintf("w%d", i)}))
	}
	var actors []*store.Actor
	for i := range 10 {
		actors = append(actors, newActor(t, s, fmt.Sprintf("a%d", i), nil))
	}
	var mu sync.Mutex
	claimed := map[string]string{}
	var wg sync.WaitGroup
	for _, a := range actors {
		wg.Go(func() {
			_, w, err := s.ClaimWorker(ctx, a, "")
			if errors.Is(err, store.ErrNoFreeWorker) {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if prev, dup := claimed[w.Name]; dup {
				t.Errorf("worker %s claimed by %s and %s", w.Name, prev, a.Name)
			}
			claimed[w.Name] = a.Name
		})
	}
	wg.Wait()
	if len(claimed) != 3 {
		t.Fatalf("claimed %d workers, want 3", len(claimed))
	}
}

func testLeases(t *testing.T, s store.Store) {
	ctx := context.Background()
	l1, err := s.AcquireLease(ctx, "actor/a", "h1", time.Minute)
	must(t, err)
	_, err = s.AcquireLease(ctx, "actor/a", "h2", time.Minute)
	wantErr(t, err, store.ErrLeaseHeld)
	l1b, err := s.AcquireLease(ctx, "actor/a", "h1", time.Minute)
	must(t, err)
	if l1b.Token <= l1.Token {
		t.Fatalf("token did not grow: %d then %d", l1.Token, l1b.Token)
	}
	must(t, s.ReleaseLease(ctx, "actor/a", "h2")) // not the holder: no-op
	_, err = s.AcquireLease(ctx, "actor/a", "h2", time.Minute)
	wantErr(t, err, store.ErrLeaseHeld)
	must(t, s.ReleaseLease(ctx, "actor/a", "h1"))
	l2, err := s.AcquireLease(ctx, "actor/a", "h2", time.Nanosecond)
	must(t, err)
	if l2.Token <= l1b.Token {
		t.Fatal("token did not grow across holders")
	}
	// An expired lease can be taken over, and says from whom.
	deadline := time.Now().Add(5 * time.Second)
	var l3 *store.Lease
	for {
		l3, err = s.AcquireLease(ctx, "actor/a", "h3", time.Minute)
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	must(t, err)
	if l1.TakenFrom != "" || l1b.TakenFrom != "" || l3.TakenFrom != "h2" {
		t.Fatalf("taken from %q, %q (a free lease, then its own), %q (h2's, expired); want \"\", \"\", \"h2\"", l1.TakenFrom, l1b.TakenFrom, l3.TakenFrom)
	}
}

// testTakeOverLease: a lease with time left is taken over only from a
// holder whose heartbeat (store.HolderKey) has expired — not from one
// that keeps none or keeps it alive, and never by AcquireLease — and the
// old holder is fenced.
func testTakeOverLease(t *testing.T, s store.Store) {
	ctx := context.Background()
	l1, err := s.AcquireLease(ctx, "actor/t", "h1", time.Hour)
	must(t, err)
	_, err = s.TakeOverLease(ctx, "actor/t", "h2", time.Hour)
	wantErr(t, err, store.ErrLeaseHeld) // h1 keeps no heartbeat
	_, err = s.AcquireLease(ctx, store.HolderKey("h1"), "h1", time.Hour)
	must(t, err)
	_, err = s.TakeOverLease(ctx, "actor/t", "h2", time.Hour)
	wantErr(t, err, store.ErrLeaseHeld) // h1's heartbeat is alive
	// h1 falls silent: its heartbeat's last renewal runs out.
	_, err = s.AcquireLease(ctx, store.HolderKey("h1"), "h1", time.Microsecond)
	must(t, err)
	var l2 *store.Lease
	testwait.Until(t, "h1's heartbeat to expire", func() bool {
		_, err := s.AcquireLease(ctx, "actor/t", "h3", time.Hour)
		wantErr(t, err, store.ErrLeaseHeld) // only a takeover may
		l2, err = s.TakeOverLease(ctx, "actor/t", "h2", time.Hour)
		if err != nil {
			wantErr(t, err, store.ErrLeaseHeld)
		}
		return err == nil
	})
	if l2.Holder != "h2" || l2.Token <= l1.Token || l2.TakenFrom != "h1" {
		t.Fatalf("taken over as %+v; want h2's, from h1, with a token above h1's %d", l2, l1.Token)
	}
	_, err = s.RenewLease(ctx, "actor/t", "h1", l1.Token, time.Hour)
	wantErr(t, err, store.ErrFenced)
	// A holder whose heartbeat is alive again keeps its leases.
	_, err = s.AcquireLease(ctx, store.HolderKey("h2"), "h2", time.Hour)
	must(t, err)
	_, err = s.TakeOverLease(ctx, "actor/t", "h1", time.Hour)
	wantErr(t, err, store.ErrLeaseHeld)
}

// testWorkerInvariant: an actor can never be written as holding a worker
// that was deleted or claimed by someone else, and node preference holds.
func testWorkerInvariant(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	must(t, s.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n0"}))
	must(t, s.PutWorker(ctx, &store.Worker{Name: "w1", Node: "n1"}))
	a := newActor(t, s, "a", nil)
	ra, w, err := s.ClaimWorker(ctx, a, "n1")
	must(t, err)
	if w.Name != "w1" {
		t.Fatalf("claim on node n1 got %s", w.Name)
	}
	// A held worker is not deleted (its holder is crashed first); once
	// released it is, and the actor cannot be written as holding it.
	wantErr(t, s.DeleteWorker(ctx, "w1"), store.ErrConflict)
	must(t, s.ReleaseWorker(ctx, "w1", ra.UID))
	must(t, s.DeleteWorker(ctx, "w1"))
	must(t, s.DeleteWorker(ctx, "w1"))
	running := *ra
	running.State = store.Running
	_, err = s.UpdateActor(ctx, &running)
	wantErr(t, err, store.ErrConflict)
	other := *ra
	other.Worker = "w0" // never point at a worker it did not claim
	_, err = s.UpdateActor(ctx, &other)
	wantErr(t, err, store.ErrConflict)
	back := *ra
	back.State, back.Worker = store.Suspended, ""
	_, err = s.UpdateActor(ctx, &back)
	must(t, err)
	b := newActor(t, s, "b", nil)
	_, _, err = s.ClaimWorker(ctx, b, "n1")
	wantErr(t, err, store.ErrNoFreeWorker)
}

// testNodeScopedClaim: a claim on a node takes only that node's workers,
// even when another node's name extends it, and follows a worker that
// re-registers under another node.
func testNodeScopedClaim(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	must(t, s.PutWorker(ctx, &store.Worker{Name: "a0", Node: "n10"}))
	must(t, s.PutWorker(ctx, &store.Worker{Name: "z9", Node: "n1"}))
	a := newActor(t, s, "a", nil)
	_, w, err := s.ClaimWorker(ctx, a, "n1")
	must(t, err)
	if w.Name != "z9" {
		t.Fatalf("claim on node n1 got %s of node %s", w.Name, w.Node)
	}
	b := newActor(t, s, "b", nil)
	_, _, err = s.ClaimWorker(ctx, b, "n1")
	wantErr(t, err, store.ErrNoFreeWorker)
	must(t, s.PutWorker(ctx, &store.Worker{Name: "a0", Node: "n1"}))
	_, w, err = s.ClaimWorker(ctx, b, "n1")
	must(t, err)
	if w.Name != "a0" {
		t.Fatalf("claim after a0 moved to n1 got %s", w.Name)
	}
	c := newActor(t, s, "c", nil)
	_, _, err = s.ClaimWorker(ctx, c, "n10")
	wantErr(t, err, store.ErrNoFreeWorker)
}

func testRecordActivity(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	a := newActor(t, s, "a", nil)
	t1 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	must(t, s.RecordActivity(ctx, []names.Activity{
		{Actor: names.ActorKey{Atespace: "default", Name: "a"}, Last: t1},
		{Actor: names.ActorKey{Atespace: "default", Name: "gone"}, Last: t1}, // skipped
	}))
	got, err := s.GetActor(ctx, names.ActorKey{Atespace: "default", Name: "a"})
	must(t, err)
	if !got.LastActivity.Equal(t1) || got.Version != a.Version+1 {
		t.Fatalf("after activity: %+v", got)
	}
	must(t, s.RecordActivity(ctx, []names.Activity{{Actor: names.ActorKey{Atespace: "default", Name: "a"}, Last: t1.Add(-time.Hour)}}))
	if again, _ := s.GetActor(ctx, names.ActorKey{Atespace: "default", Name: "a"}); !again.LastActivity.Equal(t1) || again.Version != got.Version {
		t.Fatalf("older activity moved the record: %+v", again)
	}
}

// testAnyString: any Go string round-trips in a record, a NUL byte too
// (PostgreSQL's jsonb refuses \u0000, so records are not stored as jsonb).
func testAnyString(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	a := newActor(t, s, "a", nil)
	a.Message = "bad\x00byte"
	_, err := s.UpdateActor(ctx, a)
	must(t, err)
	got, err := s.GetActor(ctx, a.Key())
	must(t, err)
	if got.Message != a.Message {
		t.Fatalf("message read back as %q, want %q", got.Message, a.Message)
	}
}

// testMoveTemplate: UpdateActor may move an actor to another template of
// its atespace, and the old template is then free to delete; a template
// that does not exist is refused with ErrNotFound, nothing written.
func testMoveTemplate(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	must(t, s.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl2", UID: "t-2",
		Phase: store.TemplateBuilding, Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}}}}))
	a := newActor(t, s, "a", nil)
	missing := *a
	missing.Template = "nope"
	_, err := s.UpdateActor(ctx, &missing)
	wantErr(t, err, store.ErrNotFound)
	moved := *a
	moved.Template, moved.VolumesOnly = "tpl2", true
	out, err := s.UpdateActor(ctx, &moved)
	must(t, err)
	got, err := s.GetActor(ctx, a.Key())
	must(t, err)
	if got.Template != "tpl2" || !got.VolumesOnly || got.Version != out.Version {
		t.Fatalf("after the move: template %q volumesOnly %v version %d, want tpl2 true %d", got.Template, got.VolumesOnly, got.Version, out.Version)
	}
	must(t, s.DeleteTemplate(ctx, "default", "tpl"))
	wantErr(t, s.DeleteTemplate(ctx, "default", "tpl2"), store.ErrNotEmpty)
}

// testActorLabels: an actor's labels survive a create, a CAS update of
// other fields and a listing (both backends keep them in the record).
func testActorLabels(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	want := map[string]string{"app": "notes", "example.com/track": "stable", "empty": ""}
	a := &store.Actor{Atespace: "default", Name: "l", UID: "uid-l", Template: "tpl",
		Lifecycle: store.Lifecycle{State: store.Suspended}, Labels: maps.Clone(want)}
	must(t, s.CreateActor(ctx, a))
	b := *a
	b.Message = "updated"
	_, err := s.UpdateActor(ctx, &b)
	must(t, err)
	got, err := s.GetActor(ctx, a.Key())
	must(t, err)
	if !maps.Equal(got.Labels, want) || got.Message != "updated" {
		t.Fatalf("after update: labels %v message %q, want %v", got.Labels, got.Message, want)
	}
	list, _, err := s.ListActors(ctx, "default", 10, "")
	must(t, err)
	if len(list) != 1 || !maps.Equal(list[0].Labels, want) {
		t.Fatalf("listed %d actors, labels %v; want one with %v", len(list), list, want)
	}
}
