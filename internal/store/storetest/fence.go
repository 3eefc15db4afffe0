package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/store"
)

// fenceKey is the lease key the fencing tests write under.
const fenceKey = "actor/default/a"

// waitFor polls cond until it returns true, failing the test after
// timeout; what changes is the backend's clock, so there is nothing to
// wait on but the condition itself.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(time.Millisecond) // pacing the poll, not synchronising
	}
}

// wantFenced fails unless err is ErrFenced (and not ErrConflict) and
// names the lease's key.
func wantFenced(t *testing.T, op string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), fenceKey) {
		t.Fatalf("%s: got error %v, want ErrFenced naming %s (and not ErrConflict)", op, err, fenceKey)
	}
}

// fenceOf is the fence of lease l.
func fenceOf(l *store.Lease) store.Fence {
	return store.Fence{Key: l.Key, Holder: l.Holder, Token: l.Token}
}

// testFencedWrites: with a live lease every fenced write goes through as
// it does unfenced.
func testFencedWrites(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	must(t, s.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n"}))
	a := newActor(t, s, "a", nil)
	l, err := s.AcquireLease(ctx, fenceKey, "h1", time.Minute)
	must(t, err)
	fctx := store.WithFence(ctx, fenceOf(l))
	if f, ok := store.FenceFrom(fctx); !ok || f != fenceOf(l) {
		t.Fatalf("FenceFrom = %+v, %v", f, ok)
	}
	ra, w, err := s.ClaimWorker(fctx, a, "")
	must(t, err)
	must(t, s.ReleaseWorker(fctx, "nope", a.UID)) // a fenced no-op
	ra.State = store.Running
	ra, err = s.UpdateActor(fctx, ra)
	must(t, err)
	must(t, s.ReleaseWorker(fctx, w.Name, a.UID))
	if got, _ := s.GetWorker(ctx, w.Name); !got.Free() {
		t.Fatalf("fenced release left %s held by %q", w.Name, got.ActorUID)
	}
	ra.State, ra.Worker = store.Suspended, ""
	ra, err = s.UpdateActor(fctx, ra)
	must(t, err)
	must(t, s.DeleteActor(fctx, ra))
	if _, err := s.GetActor(ctx, a.Key()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("fenced delete: actor still readable (%v)", err)
	}
}

// checkFencedOut: every fenced write with fctx fails with ErrFenced and
// writes nothing (a stays as stored, w0 stays free, w1 stays a's).
func checkFencedOut(t *testing.T, s store.Store, fctx context.Context, a *store.Actor) {
	t.Helper()
	ctx := context.Background()
	_, _, err := s.ClaimWorker(fctx, a, "")
	wantFenced(t, "ClaimWorker", err)
	upd := *a
	upd.Message = "late"
	_, err = s.UpdateActor(fctx, &upd)
	wantFenced(t, "UpdateActor", err)
	freeing := *a
	freeing.State, freeing.Worker = store.Suspended, ""
	_, err = s.UpdateActor(fctx, &freeing)
	wantFenced(t, "UpdateActor freeing its worker", err)
	wantFenced(t, "ReleaseWorker", s.ReleaseWorker(fctx, "w1", a.UID))
	wantFenced(t, "DeleteActor", s.DeleteActor(fctx, a))

	got, err := s.GetActor(ctx, a.Key())
	must(t, err)
	if got.Version != a.Version || got.Message != a.Message || got.Worker != a.Worker {
		t.Fatalf("a fenced write changed the actor: %+v, was %+v", got, a)
	}
	if w0, err := s.GetWorker(ctx, "w0"); err != nil || !w0.Free() {
		t.Fatalf("a fenced claim took w0: %+v, %v", w0, err)
	}
	if w1, err := s.GetWorker(ctx, "w1"); err != nil || w1.ActorUID != a.UID {
		t.Fatalf("a fenced write freed w1: %+v, %v", w1, err)
	}
}

// fencedSetup seeds a store with free worker w0 and actor a RESUMING on
// w1, claimed unfenced.
func fencedSetup(t *testing.T, s store.Store) *store.Actor {
	t.Helper()
	ctx := context.Background()
	seed(t, s)
	must(t, s.PutWorker(ctx, &store.Worker{Name: "w1", Node: "n"}))
	a, _, err := s.ClaimWorker(ctx, newActor(t, s, "a", nil), "")
	must(t, err)
	must(t, s.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n"}))
	return a
}

// testFenceExpired: once the lease has expired, even with no one else
// holding it, fenced writes fail with ErrFenced and write nothing.
func testFenceExpired(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := fencedSetup(t, s)
	l, err := s.AcquireLease(ctx, fenceKey, "h1", 5*time.Millisecond)
	must(t, err)
	fctx := store.WithFence(ctx, fenceOf(l))
	// A fenced release of a worker no one holds writes nothing either way,
	// so it can probe the lease without disturbing anything.
	waitFor(t, 10*time.Second, "lease with a 5 ms ttl expires", func() bool {
		return errors.Is(s.ReleaseWorker(fctx, "nope", "nobody"), store.ErrFenced)
	})
	checkFencedOut(t, s, fctx, a)
	_, err = s.RenewLease(ctx, fenceKey, "h1", l.Token, time.Minute)
	wantFenced(t, "RenewLease of an expired lease", err)
	// A fence on a key that never had a lease is as dead.
	_, err = s.UpdateActor(store.WithFence(ctx, store.Fence{Key: fenceKey + "-never", Holder: "h1", Token: l.Token}), a)
	wantFenced(t, "UpdateActor under a lease that never existed", err)
}

// testFenceTakenOver: after another holder took the expired lease, the
// first holder's fenced writes fail and the new holder's succeed.
func testFenceTakenOver(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := fencedSetup(t, s)
	l1, err := s.AcquireLease(ctx, fenceKey, "h1", 5*time.Millisecond)
	must(t, err)
	var l2 *store.Lease
	waitFor(t, 10*time.Second, "h2 takes over h1's expired lease", func() bool {
		l2, err = s.AcquireLease(ctx, fenceKey, "h2", time.Minute)
		if err != nil && !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatal(err)
		}
		return err == nil
	})
	if l2.Token <= l1.Token {
		t.Fatalf("takeover token %d, not above %d", l2.Token, l1.Token)
	}
	checkFencedOut(t, s, store.WithFence(ctx, fenceOf(l1)), a)
	// The same holder name with the old token is fenced too: a restarted
	// replica reusing its name must not pass as the new holder.
	if _, err := s.AcquireLease(ctx, fenceKey, "h1", time.Minute); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("h1 took h2's live lease: %v", err)
	}
	upd := *a
	upd.State = store.Running
	got, err := s.UpdateActor(store.WithFence(ctx, fenceOf(l2)), &upd)
	must(t, err)
	if got.Version != a.Version+1 {
		t.Fatalf("h2's fenced update: version %d, want %d", got.Version, a.Version+1)
	}
}

// testRenewLease: renewal extends the expiry and keeps the token; a wrong
// holder or token, or a takeover, fences the renewer.
func testRenewLease(t *testing.T, s store.Store) {
	ctx := context.Background()
	l, err := s.AcquireLease(ctx, fenceKey, "h1", time.Second)
	must(t, err)
	r, err := s.RenewLease(ctx, fenceKey, "h1", l.Token, time.Hour)
	must(t, err)
	if r.Token != l.Token || r.Key != fenceKey || r.Holder != "h1" || !r.Expiry.After(l.Expiry.Add(50*time.Minute)) {
		t.Fatalf("renewed %+v, acquired %+v: want the same token and an hour's expiry", r, l)
	}
	// Renewed for an hour, the lease is not takeable.
	if _, err := s.AcquireLease(ctx, fenceKey, "h2", time.Minute); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("acquire of a renewed lease: %v, want ErrLeaseHeld", err)
	}
	_, err = s.RenewLease(ctx, fenceKey, "h2", l.Token, time.Minute)
	wantFenced(t, "RenewLease by another holder", err)
	_, err = s.RenewLease(ctx, fenceKey, "h1", l.Token+1000, time.Minute)
	wantFenced(t, "RenewLease with another token", err)
	must(t, s.ReleaseLease(ctx, fenceKey, "h1"))
	_, err = s.RenewLease(ctx, fenceKey, "h1", l.Token, time.Minute)
	wantFenced(t, "RenewLease of a released lease", err)
	l2, err := s.AcquireLease(ctx, fenceKey, "h2", time.Minute)
	must(t, err)
	_, err = s.RenewLease(ctx, fenceKey, "h1", l.Token, time.Minute)
	wantFenced(t, "RenewLease after takeover", err)
	if r2, err := s.RenewLease(ctx, fenceKey, "h2", l2.Token, time.Minute); err != nil || r2.Token != l2.Token {
		t.Fatalf("new holder's renewal = %+v, %v", r2, err)
	}
}

// checkBindings reads back every worker and actor and fails unless
// worker.ActorUID and actor.Worker agree both ways; it returns the number
// of bound workers.
func checkBindings(t *testing.T, s store.Store, actors []*store.Actor) int {
	t.Helper()
	ctx := context.Background()
	workers, err := s.ListWorkers(ctx)
	must(t, err)
	byUID := map[string]*store.Actor{}
	for _, a := range actors {
		got, err := s.GetActor(ctx, a.Key())
		must(t, err)
		byUID[got.UID] = got
	}
	holders := map[string]string{} // worker → actor UID
	for _, w := range workers {
		if w.Free() {
			if !w.Actor.IsZero() {
				t.Errorf("free worker %s names actor %s", w.Name, w.Actor)
			}
			continue
		}
		holders[w.Name] = w.ActorUID
		a, ok := byUID[w.ActorUID]
		if !ok || a.Worker != w.Name || w.Actor != a.Key() {
			t.Errorf("worker %s held by %s (%s), but that actor is %+v", w.Name, w.ActorUID, w.Actor, a)
		}
	}
	for _, a := range byUID {
		if a.Worker != "" && holders[a.Worker] != a.UID {
			t.Errorf("actor %s points at worker %s, which is held by %q", a.Name, a.Worker, holders[a.Worker])
		}
	}
	return len(holders)
}

// testClaimManyConcurrent: 50 goroutines resume 50 actors against 10
// workers at once: exactly 10 claims succeed, each worker bound once and
// each actor at most once, and the stored records agree both ways. A
// second round frees the 10 while the 40 others claim, and the records
// still agree.
func testClaimManyConcurrent(t *testing.T, s store.Store) {
	const nActors, nWorkers = 50, 10
	ctx := context.Background()
	seed(t, s)
	for i := range nWorkers {
		must(t, s.PutWorker(ctx, &store.Worker{Name: fmt.Sprintf("w%02d", i), Node: fmt.Sprintf("n%d", i%3)}))
	}
	actors := make([]*store.Actor, nActors)
	for i := range actors {
		actors[i] = newActor(t, s, fmt.Sprintf("a%02d", i), nil)
	}
	results := make([]*store.Actor, nActors)
	errs := make([]error, nActors)
	start := make(chan struct{})
	done := make(chan int)
	for i, a := range actors {
		go func() {
			<-start
			results[i], _, errs[i] = s.ClaimWorker(ctx, a, "")
			done <- i
		}()
	}
	close(start)
	for range actors {
		<-done
	}
	claimed := map[string]string{}
	var winners, losers []*store.Actor
	for i, err := range errs {
		switch {
		case err == nil:
			if prev, dup := claimed[results[i].Worker]; dup {
				t.Errorf("worker %s claimed by %s and %s", results[i].Worker, prev, actors[i].Name)
			}
			claimed[results[i].Worker] = actors[i].Name
			winners = append(winners, results[i])
		case errors.Is(err, store.ErrNoFreeWorker):
			losers = append(losers, actors[i])
		default:
			t.Errorf("claim for %s: %v", actors[i].Name, err)
		}
	}
	if len(claimed) != nWorkers || len(winners) != nWorkers {
		t.Fatalf("%d claims succeeded on %d workers, want %d", len(winners), len(claimed), nWorkers)
	}
	if n := checkBindings(t, s, actors); n != nWorkers {
		t.Fatalf("%d workers bound after the claims, want %d", n, nWorkers)
	}

	// Round two: the winners suspend (freeing their workers) while the
	// losers claim, all at once.
	start = make(chan struct{})
	all := append(winners, losers...)
	for i, a := range all {
		go func() {
			<-start
			if i < len(winners) {
				n := *a
				n.State, n.Worker = store.Suspended, ""
				_, errs[i] = s.UpdateActor(ctx, &n)
			} else if _, _, errs[i] = s.ClaimWorker(ctx, a, ""); errors.Is(errs[i], store.ErrNoFreeWorker) {
				errs[i] = nil
			}
			done <- i
		}()
	}
	close(start)
	for range all {
		<-done
	}
	for i, err := range errs[:len(all)] {
		if err != nil {
			t.Errorf("round two, %s: %v", all[i].Name, err)
		}
	}
	if n := checkBindings(t, s, actors); n > nWorkers {
		t.Fatalf("%d workers bound, only %d exist", n, nWorkers)
	}
}
