package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/up"
)

// TestMain runs with the collector target `ate up` sets (up.TuneGC), since
// the cluster stands for an `ate up` process; or, started by
// BenchmarkNodeProtocol with $ATE_BENCH_NODE, as a fake node process.
func TestMain(m *testing.M) {
	if spec := os.Getenv(envNode); spec != "" {
		os.Exit(runNodeChild(spec))
	}
	up.TuneGC()
	goleak.VerifyTestMain(m)
}

// templateName is the template every benchmark creates.
const templateName = "counter"

// layout packs the benchmark image into dir/image and makes the data
// directory dir/data; it returns the image reference and the data dir.
func layout(tb testing.TB, dir string) (ref, data string) {
	tb.Helper()
	ref, err := PackImage(context.Background(), filepath.Join(dir, "image"))
	if err != nil {
		tb.Fatal(err)
	}
	data = filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		tb.Fatal(err)
	}
	return ref, data
}

// startCluster starts a Cluster in dir with the counter template built.
func startCluster(tb testing.TB, dir string, workers int, fc fake.Config) *Cluster {
	tb.Helper()
	ctx := context.Background()
	ref, data := layout(tb, dir)
	c, err := Start(ctx, Config{Dir: data, Workers: workers, Fake: fc})
	if err != nil {
		tb.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := CreateTemplate(wctx, c.Client, templateName, ref); err != nil {
		_ = c.Close()
		tb.Fatal(err)
	}
	return c
}

func closeCluster(tb testing.TB, c *Cluster) {
	tb.Helper()
	if err := c.Close(); err != nil {
		tb.Errorf("close cluster: %v", err)
	}
}

// createActors creates actors ActorName(0..n-1) through the API.
func createActors(tb testing.TB, c atev1.ControlClient, n int) []string {
	tb.Helper()
	var out []string
	for i := range n {
		_, err := c.CreateActor(context.Background(), &atev1.CreateActorRequest{Actor: &atev1.Actor{
			Atespace: names.DefaultAtespace, Name: ActorName(i), Template: templateName}})
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, ActorName(i))
	}
	return out
}

func resume(ctx context.Context, c atev1.ControlClient, name string) (*atev1.Actor, error) {
	return c.ResumeActor(ctx, &atev1.ResumeActorRequest{Atespace: names.DefaultAtespace, Name: name})
}

func suspend(ctx context.Context, c atev1.ControlClient, name string) (*atev1.Actor, error) {
	return c.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: names.DefaultAtespace, Name: name})
}

// getCount sends GET / to the actor's sandbox on its worker, through the
// runtime's dialer as the worker tunnel would.
func getCount(t *testing.T, c *Cluster, worker string) string {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return c.Runtime.DialContext(ctx, sandbox.Slot{Name: worker}, Port)
	}, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://actor/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// TestClusterKeepsStateAcrossSuspend drives the whole path the benchmarks
// measure and checks the fake sandbox's state really travels through the
// node's snapshot store: the count carries on after each suspend/resume,
// also on another worker.
func TestClusterKeepsStateAcrossSuspend(t *testing.T) {
	c := startCluster(t, t.TempDir(), 2, fake.Config{})
	defer closeCluster(t, c)
	ctx := t.Context()
	name := createActors(t, c.Client, 1)[0]
	var workers []string
	for i := range 3 {
		a, err := resume(ctx, c.Client, name)
		if err != nil {
			t.Fatal(err)
		}
		if a.GetState() != atev1.ActorState_RUNNING || a.GetWorker() == "" {
			t.Fatalf("after resume %d: %v on %q", i, a.GetState(), a.GetWorker())
		}
		workers = append(workers, a.GetWorker())
		if got, want := getCount(t, c, a.GetWorker()), fmt.Sprintf("count=%d\n", i+1); got != want {
			t.Fatalf("resume %d answered %q, want %q (state lost across the snapshot)", i, got, want)
		}
		s, err := suspend(ctx, c.Client, name)
		if err != nil {
			t.Fatal(err)
		}
		if s.GetState() != atev1.ActorState_SUSPENDED || s.GetSnapshot() == "" || s.GetWorker() != "" {
			t.Fatalf("after suspend %d: %v snapshot %q worker %q", i, s.GetState(), s.GetSnapshot(), s.GetWorker())
		}
	}
	if n := c.Runtime.Len(); n != 0 {
		t.Fatalf("%d sandboxes run after every actor was suspended", n)
	}
	t.Logf("workers used: %v", workers)
}

// TestStartFailureClosesCleanly: a Start that fails part-way (here the
// store cannot open: its path is a directory) returns the error and
// closes what it had built, instead of failing on a half-built cluster.
func TestStartFailureClosesCleanly(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, up.DBName), 0o700); err != nil {
		t.Fatal(err)
	}
	c, err := Start(t.Context(), Config{Dir: dir, Workers: 1})
	if err == nil || c != nil {
		t.Fatalf("Start = %v, %v; want an error", c, err)
	}
}

// TestClusterDetectsCrash kills an actor's sandbox through the fake
// runtime's hook: the node notices, the actor becomes CRASHED with its
// worker freed, and it resumes from its last snapshot.
func TestClusterDetectsCrash(t *testing.T) {
	c := startCluster(t, t.TempDir(), 1, fake.Config{})
	defer closeCluster(t, c)
	ctx := t.Context()
	name := createActors(t, c.Client, 1)[0]
	a, err := resume(ctx, c.Client, name)
	if err != nil {
		t.Fatal(err)
	}
	getCount(t, c, a.GetWorker()) // count=1, lost with the crash
	id, ok := c.Runtime.Container(a.GetWorker())
	if !ok {
		t.Fatalf("worker %s hosts no sandbox", a.GetWorker())
	}
	if err := c.Runtime.Kill(id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, err = c.Client.GetActor(ctx, &atev1.GetActorRequest{Atespace: names.DefaultAtespace, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if a.GetState() == atev1.ActorState_CRASHED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("actor still %v 10s after its sandbox was killed", a.GetState())
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	ws, err := c.Client.ListWorkers(ctx, &atev1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(ws.GetWorkers(), func(w *atev1.Worker) bool { return w.GetPhase() != atev1.Worker_FREE }); i >= 0 {
		t.Fatalf("worker %s still claimed after the crash", ws.GetWorkers()[i].GetName())
	}
	a, err = resume(ctx, c.Client, name)
	if err != nil {
		t.Fatal(err)
	}
	if got := getCount(t, c, a.GetWorker()); got != "count=1\n" {
		t.Fatalf("resumed from the golden snapshot, want count=1 again, got %q", got)
	}
}

// TestPreloadedClusterBuildsTemplate starts a Cluster over a preloaded
// store: Recover builds the BUILDING template and every actor is listed.
func TestPreloadedClusterBuildsTemplate(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	ref, data := layout(t, dir)
	stage := filepath.Join(dir, "stage")
	if err := os.MkdirAll(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	const n = 250
	if _, err := Preload(ctx, PreloadConfig{Dir: data, StageDir: stage, Template: templateName, ImageRef: ref,
		Actors: n, Parallel: 4}); err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, Config{Dir: data, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer closeCluster(t, c)
	if err := WaitTemplateReady(ctx, c.Client, templateName); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for token := ""; ; {
		page, err := c.Client.ListActors(ctx, &atev1.ListActorsRequest{PageSize: 100, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range page.GetActors() {
			listed = append(listed, a.GetName())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(listed) != n || listed[0] != ActorName(0) || listed[n-1] != ActorName(n-1) || !slices.IsSorted(listed) {
		t.Fatalf("listed %d actors (%v … %v), want %d in order", len(listed), listed[:1], listed[len(listed)-1:], n)
	}
	if _, err := resume(ctx, c.Client, ActorName(n/2)); err != nil {
		t.Fatal(err)
	}
}

// clientCounts are the concurrencies the control-plane benchmarks sweep.
var clientCounts = []int{1, 4, 8, 16, maxClients}

// mediumDir returns a fresh directory for b on medium: "disk" is the
// benchmark's temp dir, "tmpfs" one on /dev/shm, removed after b.
func mediumDir(b *testing.B, medium string) string {
	if medium != "tmpfs" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "ate-bench-")
	if err != nil {
		b.Fatalf("tmpfs dir (needs /dev/shm): %v", err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// runParallel runs b.N calls of op spread over workers goroutines (op
// gets the goroutine's index and how many calls it made before) and
// returns every call's latency and the wall time of all. The first
// error fails b.
func runParallel(b *testing.B, workers int, op func(worker, n int) error) ([]time.Duration, time.Duration) {
	var next atomic.Int64
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for n := 0; next.Add(1) <= int64(b.N); n++ {
				t0 := time.Now()
				if err := op(w, n); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	return slices.Concat(lat...), elapsed
}
