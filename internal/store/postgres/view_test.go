package postgres

import (
	"context"
	"errors"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/store"
)

// seedActor creates atespace default, template tpl and actor name on s.
func seedActor(t *testing.T, s store.Store, name string) *store.Actor {
	t.Helper()
	ctx := context.Background()
	if _, err := s.GetAtespace(ctx, "default"); errors.Is(err, store.ErrNotFound) {
		if err := s.CreateAtespace(ctx, &store.Atespace{Name: "default", UID: "ns"}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl", UID: "t",
			Spec: &atev1.ActorTemplateSpec{}}); err != nil {
			t.Fatal(err)
		}
	}
	a := &store.Actor{Atespace: "default", Name: name, UID: "uid-" + name, Template: "tpl",
		Lifecycle: store.Lifecycle{State: store.Suspended}}
	if err := s.CreateActor(ctx, a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestViewFollowsOtherStore: what a second Store (another replica) does
// to the workers reaches the first's view: an added worker, its claim,
// its release, a re-registration under another node, its deletion.
func TestViewFollowsOtherStore(t *testing.T) {
	ctx := context.Background()
	url := srv.NewDatabase(t)
	s1, s2 := openStore(t, url), openStore(t, url)
	viewSays := func(what string, cond func(e viewEntry, ok bool) bool) {
		t.Helper()
		waitFor(t, what, func() bool { return cond(s1.view.get("w0")) })
	}
	if err := s2.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n0", Labels: map[string]string{"pool": "a"}}); err != nil {
		t.Fatal(err)
	}
	viewSays("added w0 free on n0", func(e viewEntry, ok bool) bool { return ok && e.free && e.node == "n0" && e.labels["pool"] == "a" })
	a, _, err := s2.ClaimWorker(ctx, seedActor(t, s2, "a"), "")
	if err != nil {
		t.Fatal(err)
	}
	viewSays("w0 claimed", func(e viewEntry, ok bool) bool { return ok && !e.free })
	if err := s2.ReleaseWorker(ctx, "w0", a.UID); err != nil {
		t.Fatal(err)
	}
	viewSays("w0 freed", func(e viewEntry, ok bool) bool { return ok && e.free })
	if err := s2.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	viewSays("w0 moved to n1", func(e viewEntry, ok bool) bool { return ok && e.node == "n1" && e.labels == nil })
	if err := s2.DeleteWorker(ctx, "w0"); err != nil {
		t.Fatal(err)
	}
	viewSays("w0 deleted", func(_ viewEntry, ok bool) bool { return !ok })
	if got := s1.view.candidates("", nil, 10); len(got) != 0 {
		t.Fatalf("candidates after the delete: %v", got)
	}
}

// TestFallbackClaimsUnheardWorker: a worker the view has not heard of
// (inserted with triggers off, so no notification is ever sent) is still
// claimed, by the fallback query.
func TestFallbackClaimsUnheardWorker(t *testing.T) {
	ctx := context.Background()
	url := srv.NewDatabase(t)
	s := openStore(t, url)
	a := seedActor(t, s, "a")
	tx, err := connect(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// replica mode fires no ordinary triggers: no NOTIFY (superuser only;
	// pgtest's is).
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO workers (name, node, tunnel_addr, sandbox_class) VALUES ('ghost', 'n', '', '')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.view.get("ghost"); ok {
		t.Fatal("the view heard of a worker inserted without notification")
	}
	_, w, err := s.ClaimWorker(ctx, a, "n")
	if err != nil || w.Name != "ghost" || w.ActorUID != a.UID {
		t.Fatalf("claim = %+v, %v; want ghost", w, err)
	}
	if e, ok := s.view.get("ghost"); !ok || e.free {
		t.Fatalf("after its claim, the view has ghost as %+v, %v; want held", e, ok)
	}
}

// TestStaleViewNeverMisclaims: a view that believes a taken worker free
// (another replica's claim not yet heard of) costs a skipped candidate,
// not a second binding; and the claim still finds the free worker it
// does not know.
func TestStaleViewNeverMisclaims(t *testing.T) {
	ctx := context.Background()
	url := srv.NewDatabase(t)
	s1, s2 := openStore(t, url), openStore(t, url)
	if err := s2.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n"}); err != nil {
		t.Fatal(err)
	}
	a, _, err := s2.ClaimWorker(ctx, seedActor(t, s2, "a"), "")
	if err != nil {
		t.Fatal(err)
	}
	// Make s1's view stale for good: w0 free at a revision no row has.
	s1.view.put("w0", viewEntry{node: "n", free: true, rev: 1 << 62})
	b := seedActor(t, s2, "b")
	if _, _, err := s1.ClaimWorker(ctx, b, "", "w0"); !errors.Is(err, store.ErrNoFreeWorker) {
		t.Fatalf("claim with only w0, taken, believed free: %v, want ErrNoFreeWorker", err)
	}
	if err := s2.PutWorker(ctx, &store.Worker{Name: "w1", Node: "n"}); err != nil {
		t.Fatal(err)
	}
	s1.view.remove("w1", 1<<62) // and blind to w1 for good
	_, w, err := s1.ClaimWorker(ctx, b, "")
	if err != nil || w.Name != "w1" {
		t.Fatalf("claim with w1 free but unknown to the view = %+v, %v; want w1", w, err)
	}
	if got, err := s1.GetWorker(ctx, "w0"); err != nil || got.ActorUID != a.UID {
		t.Fatalf("w0 = %+v, %v; want still a's", got, err)
	}
}
