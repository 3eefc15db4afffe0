package bench

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/sandbox/fake"
)

// ScaleEnv is the environment variable that opts in to the largest scale
// step (1e6 actors: about a minute to preload, and minutes to run).
const ScaleEnv = "ATE_BENCH_SCALE"

// Scale benchmark shape.
const (
	// scaleWorkers is `ate up`'s default worker count.
	scaleWorkers = 4
	// scalePage is the ListActors page size measured; scaleWalkPage is
	// the largest the API allows, used to walk to the deep page.
	scalePage     = 100
	scaleWalkPage = 1000
	// scaleDeep places the deep page this far into the keyspace.
	scaleDeep = 0.9
	// scalePicks is how many actors, spread over the keyspace, the
	// resume/suspend cycle visits in turn.
	scalePicks = 64
	// preloadParallel goroutines create actors (bbolt serialises the
	// transactions; more only add contention).
	preloadParallel = 4
)

// BenchmarkScale shows what the number of stored actors costs: one op is a
// first-page ListActors, a deep-page ListActors (page token), and a
// ResumeActor + SuspendActor of one actor (actors spread over the
// keyspace, in turn), and one bare store write (UpdateActor) of that
// actor. It also reports the Go heap in use after a GC, the
// bolt file's size, the preload's creation rate, and how long the
// cluster took to start over the preloaded store (Cluster.Started: the
// snapshot collection that reads every actor runs in the background and
// is waited for, untimed, before the timed operations). 1e6 runs only
// with ATE_BENCH_SCALE=full.
func BenchmarkScale(b *testing.B) {
	full := os.Getenv(ScaleEnv) == "full"
	for _, size := range []struct {
		label string
		n     int
		optIn bool
	}{{"1e4", 1e4, false}, {"1e5", 1e5, false}, {"1e6", 1e6, true}} {
		var env *scaleEnv
		dir := b.TempDir()
		b.Run("actors="+size.label, func(b *testing.B) {
			if size.optIn && !full {
				b.Skipf("1e6 actors take minutes: set %s=full to run this step", ScaleEnv)
			}
			if env == nil {
				env = newScaleEnv(b, dir, size.n)
			}
			env.run(b)
		})
		// Stop this size before the next starts, so its memory and
		// files are not counted there.
		if env != nil {
			closeCluster(b, env.c)
		}
		_ = os.RemoveAll(dir)
	}
}

// scaleEnv is one preloaded cluster, shared by the runs of one size.
type scaleEnv struct {
	c         *Cluster
	n         int
	deepToken string
	picks     []string
	preload   PreloadStats
}

func newScaleEnv(b *testing.B, dir string, n int) *scaleEnv {
	ctx := context.Background()
	ref, data := layout(b, dir)
	stage := mediumDir(b, "tmpfs")
	stats, err := Preload(ctx, PreloadConfig{Dir: data, StageDir: stage, Template: templateName, ImageRef: ref,
		Actors: n, Parallel: preloadParallel})
	if err != nil {
		b.Fatal(err)
	}
	c, err := Start(ctx, Config{Dir: data, Workers: scaleWorkers, Fake: fake.Config{}})
	if err != nil {
		b.Fatal(err)
	}
	env := &scaleEnv{c: c, n: n, preload: stats}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := WaitTemplateReady(wctx, c.Client, templateName); err != nil {
		closeCluster(b, c)
		b.Fatal(err)
	}
	// The collection reads every actor; timed operations must not share
	// the cores with it.
	select {
	case <-c.SnapshotGCDone():
	case <-wctx.Done():
		closeCluster(b, c)
		b.Fatal("snapshot garbage collection did not finish within a minute")
	}
	// Walk (untimed) to the page that starts scaleDeep into the keyspace.
	for seen := 0; seen+scaleWalkPage <= int(float64(n)*scaleDeep); seen += scaleWalkPage {
		page, err := c.Client.ListActors(ctx, &atev1.ListActorsRequest{PageSize: scaleWalkPage, PageToken: env.deepToken})
		if err != nil {
			closeCluster(b, c)
			b.Fatal(err)
		}
		env.deepToken = page.GetNextPageToken()
	}
	for i := range scalePicks {
		env.picks = append(env.picks, ActorName(i*n/scalePicks+n/(2*scalePicks)))
	}
	return env
}

func (e *scaleEnv) run(b *testing.B) {
	ctx := context.Background()
	var first, deep, resumes, suspends, writes []time.Duration
	timed := func(lat *[]time.Duration, f func() error) {
		t0 := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*lat = append(*lat, time.Since(t0))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		timed(&first, func() error {
			_, err := e.c.Client.ListActors(ctx, &atev1.ListActorsRequest{Atespace: names.DefaultAtespace, PageSize: scalePage})
			return err
		})
		timed(&deep, func() error {
			page, err := e.c.Client.ListActors(ctx, &atev1.ListActorsRequest{Atespace: names.DefaultAtespace,
				PageSize: scalePage, PageToken: e.deepToken})
			if err == nil && len(page.GetActors()) != scalePage {
				b.Fatalf("deep page holds %d actors, want %d", len(page.GetActors()), scalePage)
			}
			return err
		})
		name := e.picks[i%len(e.picks)]
		timed(&resumes, func() error { _, err := resume(ctx, e.c.Client, name); return err })
		timed(&suspends, func() error { _, err := suspend(ctx, e.c.Client, name); return err })
		// One bare store write of the same actor: separates the store's
		// cost at this size from the rest of the path.
		a, err := e.c.Store.GetActor(ctx, names.ActorKey{Atespace: names.DefaultAtespace, Name: name})
		if err != nil {
			b.Fatal(err)
		}
		timed(&writes, func() error {
			a.StateTime = time.Now().UTC()
			_, err := e.c.Store.UpdateActor(ctx, a)
			return err
		})
	}
	b.StopTimer()
	reportLatency(b, "list-first-", first)
	reportLatency(b, "list-deep-", deep)
	reportLatency(b, "resume-", resumes)
	reportLatency(b, "suspend-", suspends)
	reportLatency(b, "store-write-", writes)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MB")
	if st, err := os.Stat(e.c.DBPath); err == nil {
		b.ReportMetric(float64(st.Size())/(1<<20), "bolt-MB")
	}
	b.ReportMetric(float64(e.n)/e.preload.Create.Seconds(), "created-tmpfs/s")
	b.ReportMetric(e.c.Started.Seconds(), "start-s")
}
