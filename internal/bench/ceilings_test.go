package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

// BenchmarkCeilings measures, each on its own, the two file-system-bound
// parts of a fake wake-up, so BenchmarkWakeups' rate can be read against
// what its parts allow on this machine (ops/s and p50/p99 per op):
//
//	snapshot-cycle  the snapshot store's work in one wake-up: stage a
//	                snapshot, write the fake's 11-byte state file into
//	                it, commit it (fsync file and manifest, rename into
//	                place, fsync the directory), open it as a restore
//	                does, and delete the writer's previous one
//	store-write     one bolt write transaction (UpdateActor, fsync'd,
//	                group-committed with the other writers'); a wake-up
//	                makes four: claim and RUNNING on resume, SUSPENDING
//	                and SUSPENDED on suspend (the embedded store takes no
//	                per-actor leases), so writes/s ÷ 4 bounds wake-ups/s
//
// Each writer works on its own snapshot owner or actor, as each
// BenchmarkWakeups client does; writers are 1, 4, 8, 16 and 64.
func BenchmarkCeilings(b *testing.B) {
	for _, medium := range []string{"disk", "tmpfs"} {
		b.Run("snapshot-cycle/medium="+medium, func(b *testing.B) {
			l, err := snapshot.NewLocal(mediumDir(b, medium))
			if err != nil {
				b.Fatal(err)
			}
			for _, writers := range clientCounts {
				b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
					prev := make([]string, writers)
					b.Cleanup(func() {
						for _, ref := range prev {
							_ = l.Delete(context.Background(), ref)
						}
					})
					lat, elapsed := runParallel(b, writers, func(w, _ int) error {
						ref, err := snapshotCycle(l, fmt.Sprintf("owner-%d", w), prev[w])
						prev[w] = ref
						return err
					})
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cycles/s")
					reportLatency(b, "", lat)
				})
			}
		})
	}
	b.Run("store-write/medium=disk", func(b *testing.B) {
		c := startCluster(b, b.TempDir(), 1, fake.Config{})
		defer closeCluster(b, c)
		ctx := context.Background()
		actors := createActors(b, c.Client, slices.Max(clientCounts))
		for _, writers := range clientCounts {
			b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
				// Read untimed; each write then takes the record the
				// previous one returned.
				records := make([]*store.Actor, writers)
				for w := range records {
					var err error
					if records[w], err = c.Store.GetActor(ctx, names.ActorKey{Atespace: names.DefaultAtespace, Name: actors[w]}); err != nil {
						b.Fatal(err)
					}
				}
				lat, elapsed := runParallel(b, writers, func(w, _ int) error {
					records[w].StateTime = time.Now().UTC()
					var err error
					records[w], err = c.Store.UpdateActor(ctx, records[w])
					return err
				})
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "writes/s")
				reportLatency(b, "", lat)
			})
		}
	})
}

// snapshotCycle is the snapshot store's part of one fake wake-up (see
// BenchmarkCeilings) and returns the new snapshot's reference.
func snapshotCycle(l *snapshot.Local, owner, prev string) (string, error) {
	st, err := l.Stage(owner, "")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(st.Dir, fake.StateFile), []byte(`{"count":1}`), 0o600); err != nil {
		return "", err
	}
	ref, err := l.Commit(context.Background(), st, snapshot.ScopeFull)
	if err != nil {
		return "", err
	}
	if _, err := l.Open(context.Background(), ref); err != nil {
		return "", err
	}
	if prev != "" {
		return ref, l.Delete(context.Background(), prev)
	}
	return ref, nil
}
