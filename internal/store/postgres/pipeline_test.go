package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"substrate.dev/ate/internal/store"
)

// tripCounter is a pgx tracer that counts the round trips the Store's
// connections make, one per statement sent alone and one per batch,
// leaving out the worker view's announcements and refreshes, which run
// beside the operations (view.go).
type tripCounter struct {
	mu    sync.Mutex
	trips []string // the first statement of each
}

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count(d.SQL)
	return ctx
}

func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	c.count(d.Batch.QueuedQueries[0].SQL)
	return ctx
}

func (c *tripCounter) count(sql string) {
	if strings.Contains(sql, "pg_notify") || strings.Contains(sql, "FROM workers WHERE name = ANY") {
		return
	}
	c.mu.Lock()
	c.trips = append(c.trips, sql)
	c.mu.Unlock()
}

func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData)     {}
func (c *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// openCounted opens a Store on a new database whose round trips trips
// counts, closed when t ends.
func openCounted(t testing.TB, trips *tripCounter) *Store {
	t.Helper()
	s, err := Open(context.Background(), srv.NewDatabase(t), Options{Logger: testLogger(), tracer: trips})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// during returns the round trips fn made.
func (c *tripCounter) during(fn func()) []string {
	c.mu.Lock()
	before := len(c.trips)
	c.mu.Unlock()
	fn()
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.trips[before:])
}

// TestWakeupWritesRoundTrips: a fenced claim of a worker the view
// knows, and each fenced state write of a wake-up (keeping the worker,
// and freeing it), reach the database in two round trips: BEGIN travels
// with the checks and COMMIT with the writes (issue 33: pgx's
// transactions spent one round trip on each, four to six per write). A
// batch of events takes one.
func TestWakeupWritesRoundTrips(t *testing.T) {
	ctx := context.Background()
	trips := &tripCounter{}
	s := openCounted(t, trips)
	if err := s.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n"}); err != nil {
		t.Fatal(err)
	}
	a := seedActor(t, s, "a")
	lease, err := s.AcquireLease(ctx, "actor/"+a.Key().String(), "r1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	fenced := store.WithFence(ctx, store.Fence{Key: lease.Key, Holder: lease.Holder, Token: lease.Token})
	// The view learns of w0 from PutWorker's announcement, so the claim
	// names it as a candidate.
	waitFor(t, "the view to know w0", func() bool { _, ok := s.view.get("w0"); return ok })

	for _, step := range []struct {
		name  string
		trips int
		do    func() error
	}{
		{"claim", 2, func() (err error) { a, _, err = s.ClaimWorker(fenced, a, "n"); return err }},
		{"running", 2, func() (err error) {
			n := *a
			n.State = store.Running
			a, err = s.UpdateActor(fenced, &n)
			return err
		}},
		{"suspended, freeing the worker", 2, func() (err error) {
			n := *a
			n.State, n.Worker = store.Suspended, ""
			a, err = s.UpdateActor(fenced, &n)
			return err
		}},
		{"events", 1, func() error {
			return s.AppendEvents(ctx, []*store.Event{
				{Atespace: "default", Actor: "a", Time: time.Now(), Type: store.EventNormal},
				{Atespace: "default", Actor: "a", Time: time.Now(), Type: store.EventNormal},
			})
		}},
	} {
		var err error
		if got := trips.during(func() { err = step.do() }); err != nil || len(got) != step.trips {
			t.Errorf("%s: %d round trips (err %v), want %d; they began:\n%s", step.name, len(got), err, step.trips, strings.Join(got, "\n"))
		}
	}
	if w, err := s.GetWorker(ctx, "w0"); err != nil || !w.Free() {
		t.Fatalf("w0 after the suspend: %+v, %v; want free", w, err)
	}
}

// TestPipelinedWriteFailureLeavesNothing: a pipelined write whose
// checks fail after its first batch (a stale version: the claim's
// worker was bound in that batch), or whose write fails in the batch
// that carries its COMMIT (a template that does not exist), changes
// nothing, answers the store's error, and leaves its connection idle
// for the next operation rather than closed by the pool.
func TestPipelinedWriteFailureLeavesNothing(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, srv.NewDatabase(t))
	if err := s.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the view to know w0", func() bool { _, ok := s.view.get("w0"); return ok })
	a := seedActor(t, s, "a")
	conns := s.pool.Stat().NewConnsCount()

	stale := *a
	stale.Version--
	if _, _, err := s.ClaimWorker(ctx, &stale, "n"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("claim with a stale version: %v, want ErrConflict", err)
	}
	if w, err := s.GetWorker(ctx, "w0"); err != nil || !w.Free() {
		t.Fatalf("w0 after a refused claim: %+v, %v; want free (the bind rolled back)", w, err)
	}

	a, _, err := s.ClaimWorker(ctx, a, "n")
	if err != nil {
		t.Fatal(err)
	}
	moved := *a
	moved.State, moved.Worker, moved.Template = store.Suspended, "", "no-such-template"
	if _, err := s.UpdateActor(ctx, &moved); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("write naming a missing template: %v, want ErrNotFound", err)
	}
	if w, err := s.GetWorker(ctx, "w0"); err != nil || w.Free() || w.ActorUID != a.UID {
		t.Fatalf("w0 after a failed write that would have freed it: %+v, %v; want still held by %s", w, err, a.UID)
	}
	if got, err := s.GetActor(ctx, a.Key()); err != nil || got.Version != a.Version || got.State != store.Resuming {
		t.Fatalf("actor after a failed write: %+v, %v; want version %d RESUMING", got, err, a.Version)
	}
	if n := s.pool.Stat().NewConnsCount(); n != conns {
		t.Errorf("the pool opened %d connections during failed writes: a failed transaction was not rolled back and its connection was closed", n-conns)
	}
}
