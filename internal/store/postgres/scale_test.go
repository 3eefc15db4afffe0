package postgres

import (
	"context"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"substrate.dev/ate/internal/latency"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// BenchmarkClaimScale shows what the number of workers and of actors
// costs a wake-up's store writes over PostgreSQL: one op is the claim of
// a free worker (ClaimWorker: the actor RESUMING on it), the write that
// makes it RUNNING, and the write that makes it SUSPENDED and frees the
// worker, for one of 64 actors spread over the keyspace in turn, one
// client. claim-p50/p99-ms and release-p50/p99-ms are the first and the
// last write's latency. Workers sit on 100 nodes, every one free but the
// one the op holds; actors are all SUSPENDED. Sizes: workers 1e3, 1e4
// and 1e5 with 1e4 actors; actors 1e5 and (ATE_BENCH_SCALE=full) 1e6
// with 1e3 workers. The rows are loaded by SQL (the store's own inserts
// would take minutes for 1e6), then analysed, as autovacuum would.
//
// The server is the test binary's (pgtest.Start: fsync off), so the
// figures are the store's own work, without the disk's flushes; what
// the flushes add is BenchmarkNodeProtocol's (internal/bench).
func BenchmarkClaimScale(b *testing.B) {
	full := os.Getenv("ATE_BENCH_SCALE") == "full"
	for _, size := range []struct {
		workers, actors int
		optIn           bool
	}{
		{1e3, 1e4, false}, {1e4, 1e4, false}, {1e5, 1e4, false},
		{1e3, 1e5, false}, {1e3, 1e6, true},
	} {
		b.Run(fmt.Sprintf("workers=1e%d/actors=1e%d", int(math.Log10(float64(size.workers))), int(math.Log10(float64(size.actors)))), func(b *testing.B) {
			if size.optIn && !full {
				b.Skip("1e6 actors take a minute to load: set ATE_BENCH_SCALE=full to run this size")
			}
			s, picks := loadScale(b, size.workers, size.actors)
			runClaimScale(b, s, picks)
		})
	}
}

// scalePicks is how many actors, spread over the keyspace, the ops visit
// in turn.
const scalePicks = 64

// loadScale makes a database with workers free workers on 100 nodes and
// actors SUSPENDED actors, and opens a Store on it; it returns the
// actors the ops visit.
func loadScale(b *testing.B, workers, actors int) (*Store, []*store.Actor) {
	b.Helper()
	ctx := context.Background()
	url := srv.NewDatabase(b)
	seedStore := openStore(b, url)
	seedActor(b, seedStore, "seed")
	conn := connect(b, url)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO workers (name, node, tunnel_addr, sandbox_class)
			SELECT 'w' || lpad(g::text, 7, '0'), 'node' || lpad((g % 100)::text, 3, '0'), '', 'fake'
			FROM generate_series(1, $1::int) AS g`, []any{workers}},
		// The seed's record with its name (and so its uid, "uid-seed")
		// rewritten: valid records a Store reads as its own.
		{`INSERT INTO actors (key, atespace, name, uid, template, version, state, worker, record)
			SELECT 'default/' || n, atespace, n, 'uid-' || n, template, version, state, worker,
				convert_to(replace(convert_from(record, 'UTF8'), 'seed', n), 'UTF8')
			FROM actors, LATERAL (SELECT 'a' || lpad(g::text, 7, '0') AS n FROM generate_series(1, $1::int) AS g) AS names
			WHERE key = 'default/seed'`, []any{actors}},
		{`ANALYZE`, nil},
	} {
		if _, err := conn.Exec(ctx, q.sql, q.args...); err != nil {
			b.Fatal(err)
		}
	}
	// A Store opened after the load, as a replica starting over it: its
	// view is loaded whole.
	s := openStore(b, url)
	var picks []*store.Actor
	for i := range scalePicks {
		name := fmt.Sprintf("a%07d", 1+i*actors/scalePicks)
		a, err := s.GetActor(ctx, names.ActorKey{Atespace: "default", Name: name})
		if err != nil {
			b.Fatal(err)
		}
		picks = append(picks, a)
	}
	return s, picks
}

// runClaimScale runs b.N ops over picks.
func runClaimScale(b *testing.B, s *Store, picks []*store.Actor) {
	ctx := context.Background()
	var claims, releases []time.Duration
	b.ResetTimer()
	for i := range b.N {
		a := picks[i%len(picks)]
		t0 := time.Now()
		ra, _, err := s.ClaimWorker(ctx, a, "")
		if err != nil {
			b.Fatal(err)
		}
		claims = append(claims, time.Since(t0))
		run := *ra
		run.State = store.Running
		ra, err = s.UpdateActor(ctx, &run)
		if err != nil {
			b.Fatal(err)
		}
		done := *ra
		done.State, done.Worker = store.Suspended, ""
		t0 = time.Now()
		if picks[i%len(picks)], err = s.UpdateActor(ctx, &done); err != nil {
			b.Fatal(err)
		}
		releases = append(releases, time.Since(t0))
	}
	b.StopTimer()
	latency.Report(b, "claim-", claims, 0.5, 0.99)
	latency.Report(b, "release-", releases, 0.5, 0.99)
}
