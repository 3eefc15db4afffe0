package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"substrate.dev/ate/internal/latency"
	"substrate.dev/ate/internal/store/postgres/pgtest"
)

// BenchmarkStores measures the wake-up loop of BenchmarkWakeups (resume
// then suspend, each client over its own actors, a worker per client) on
// each record store in one run: bbolt (one API server, disk), and
// PostgreSQL (a real server pgtest starts, fsync off: its commit cost is
// the network round trips and row locks, not the disk) with one API
// server and with two replicas over one database, clients split evenly
// between them. Each replica runs its own node of fake workers; the two
// share the durable snapshot directory, as replicas share S3.
// wakeups/s is resumes completed per second across all clients; p50/p99
// are ResumeActor's latency as the client sees it.
func BenchmarkStores(b *testing.B) {
	var pg *pgtest.Server
	startPG := func() *pgtest.Server {
		if pg == nil {
			var err error
			if pg, err = pgtest.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				if err := pg.Stop(); err != nil {
					b.Error(err)
				}
			})
		}
		return pg
	}
	for _, tc := range storeSetups {
		b.Run(tc.name, func(b *testing.B) {
			outer := b // the database and directories outlive each clients= run
			var clusters []*Cluster
			var actors []string
			defer func() {
				for _, c := range clusters {
					closeCluster(b, c)
				}
			}()
			for _, clients := range clientCounts {
				b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
					if clusters == nil {
						url := ""
						if tc.postgres {
							url = startPG().NewDatabase(outer)
						}
						clusters, actors = startReplicas(outer, tc.replicas, url)
					}
					runReplicaWakeups(b, clusters, actors, clients)
				})
			}
		})
	}
}

// storeSetups are the record stores and API server counts the
// benchmarks compare: bbolt (one server, it holds the file), PostgreSQL
// with one and with two replicas.
var storeSetups = []struct {
	name     string
	replicas int
	postgres bool
}{
	{"store=bolt", 1, false},
	{"store=postgres/replicas=1", 1, true},
	{"store=postgres/replicas=2", 2, true},
}

// startReplicas starts n Clusters over the store url (bolt in a temp dir
// when empty), each with maxClients/n workers, builds the template
// through the first and creates the actors.
func startReplicas(b *testing.B, n int, url string) ([]*Cluster, []string) {
	b.Helper()
	dir := b.TempDir()
	ref, _ := layout(b, dir)
	snaps := filepath.Join(dir, "snapshots")
	var out []*Cluster
	for i := range n {
		data := filepath.Join(dir, fmt.Sprintf("data%d", i))
		if err := os.MkdirAll(data, 0o700); err != nil {
			b.Fatal(err)
		}
		c, err := Start(context.Background(), Config{Dir: data, Workers: maxClients / n, Store: url, SnapshotsDir: snaps,
			NodeName: fmt.Sprintf("node%d", i), WorkerPrefix: fmt.Sprintf("bench%d", i)})
		if err != nil {
			for _, c := range out {
				closeCluster(b, c)
			}
			b.Fatal(err)
		}
		out = append(out, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := CreateTemplate(ctx, out[0].Client, templateName, ref); err != nil {
		b.Fatal(err)
	}
	return out, createActors(b, out[0].Client, maxClients*actorsPerClient)
}

// runReplicaWakeups runs b.N wake-ups over clients goroutines, client i
// calling replica i mod len(clusters) about its own actors.
func runReplicaWakeups(b *testing.B, clusters []*Cluster, actors []string, clients int) {
	ctx := context.Background()
	resumes := make([][]time.Duration, clients)
	_, elapsed := runParallel(b, clients, func(i, n int) error {
		c := clusters[i%len(clusters)].Client
		name := actors[i*actorsPerClient+n%actorsPerClient]
		t0 := time.Now()
		if _, err := resume(ctx, c, name); err != nil {
			return err
		}
		resumes[i] = append(resumes[i], time.Since(t0))
		_, err := suspend(ctx, c, name)
		return err
	})
	for _, c := range clusters {
		if n := c.Runtime.Len(); n != 0 {
			b.Fatalf("%d sandboxes still run after every wake-up was suspended", n)
		}
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "wakeups/s")
	latency.Report(b, "", slices.Concat(resumes...), 0.50, 0.99)
}
