package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/latency"
	"substrate.dev/ate/internal/snapshot"
)

// BenchmarkDensityRunning runs as many RUNNING counter actors at once as
// it is asked for (ATE_DENSITY_RUNNING; 8 under `make test`, 1000 under
// `make bench`) or as this machine holds: `ate up --workers N
// --standbys=false`, then each actor (of the counter's template without
// its 5-minute idle suspend) is created through the API and
// answered once through the router (a restore from the template's golden
// snapshot), four at a time. It stops early, and reports the count
// reached, when the machine's available memory falls below a margin
// (ATE_DENSITY_MIN_FREE_MB, default 2048) or the deadline passes, rather
// than push a shared machine into the OOM killer. Then every actor is
// asked again and must answer count=2 (it kept running: a restore would
// say count=1), and the memory is weighed at that count:
//
//   - PSS of the runsc sandbox and gofer processes of this installation,
//     per actor: what one more actor adds to the processes (shared pages
//     charged in proportion);
//   - the machine's used memory (MemTotal − MemAvailable) after the fill
//     minus before it, per actor: what it costs the machine, page cache
//     and kernel included (noisy on a shared machine);
//   - the PSS growth of `ate up` itself, per actor.
//
// Cleanup deletes every actor (destroying its sandbox) before `ate up` is
// stopped, and kills any sandbox of this installation still running after
// that, whether the benchmark passed or not.
func BenchmarkDensityRunning(b *testing.B) {
	target, deadline := 8, 3*time.Minute
	if fullBench() {
		target, deadline = 1000, 8*time.Minute
	}
	target = envInt(b, "ATE_DENSITY_RUNNING", target)
	minFree := int64(envInt(b, "ATE_DENSITY_MIN_FREE_MB", 2048)) << 20
	if avail := memInfo(b, "MemAvailable:"); avail < minFree+256<<20 {
		b.Fatalf("only %d MiB available, below the %d MiB margin (+256): free memory or lower ATE_DENSITY_MIN_FREE_MB", avail>>20, minFree>>20)
	}
	dataDir := b.TempDir()
	b.Cleanup(func() { reapSandboxes(b, dataDir) })
	started := time.Now()
	// Setting up a worker (its network namespace) takes ~0.1 s.
	in := startUpWait(b, dataDir, target, time.Minute+time.Duration(target)*200*time.Millisecond, "--demo", "--standbys=false")
	startS := time.Since(started).Seconds()
	names := make([]string, target)
	for i := range names {
		names[i] = "run-" + strconv.Itoa(i+1)
	}
	b.Cleanup(func() { deleteActors(b, in, names) })
	// The counter's template, but no actor goes idle during the run (the
	// counter's suspends after 5 minutes; a full fill takes about that).
	tpl := filepath.Join(b.TempDir(), "dense.yaml")
	src, err := os.ReadFile(filepath.Join(repoDir, "examples/counter/template.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	dense := strings.Replace(strings.Replace(string(src), "name: counter\n", "name: dense\n", 1), "idle: {after: 5m, action: suspend}", "idle: {after: 24h, action: suspend}", 1)
	if !strings.Contains(dense, "name: dense") || !strings.Contains(dense, "after: 24h") {
		b.Fatalf("examples/counter/template.yaml changed shape; adapt the density template:\n%s", src)
	}
	if err := os.WriteFile(tpl, []byte(dense), 0o600); err != nil {
		b.Fatal(err)
	}
	in.ate("create", "template", "-f", tpl)
	in.waitTemplateReady("dense")
	ateBase := procPSS(b, in.cmd.Process.Pid)
	usedBase := memInfo(b, "MemTotal:") - memInfo(b, "MemAvailable:")

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var n int
	var why string
	filled := time.Now()
	for b.Loop() {
		n, why = fillRunning(ctx, b, in, names, minFree)
	}
	fillS := time.Since(filled).Seconds()
	if n == 0 {
		b.Fatalf("no actor running: %s", why)
	}
	if why != "" {
		b.Logf("DensityRunning: stopped at %d of %d running actors: %s", n, target, why)
	}
	// Each must still be the same running sandbox.
	err = forEach(context.Background(), names[:n], 8, func(name string) error {
		code, body, _, err := in.request(http.MethodGet, "default/"+name, "/", "")
		if err != nil || code != http.StatusOK || strings.TrimSpace(body) != "count=2" {
			return fmt.Errorf("second GET of %s = %d %q %v, want 200 count=2 (still running)", name, code, body, err)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if running := countRunning(b, in, "run-"); running != n {
		b.Fatalf("%d actors RUNNING after the fill, want %d", running, n)
	}
	_, pss := runscMemory(b, dataDir)
	tasks := runscTasks(b, dataDir)
	used := memInfo(b, "MemTotal:") - memInfo(b, "MemAvailable:") - usedBase
	ateGrowth := procPSS(b, in.cmd.Process.Pid) - ateBase
	b.Logf("DensityRunning: %d running actors, %.1f MiB PSS and %.1f MiB used memory each, %d tasks", n, float64(pss)/float64(n)/(1<<20), float64(used)/float64(n)/(1<<20), tasks)
	b.ReportMetric(float64(n), "running-actors")
	b.ReportMetric(float64(pss)/float64(n)/(1<<20), "PSS-MiB/running-actor")
	b.ReportMetric(float64(used)/float64(n)/(1<<20), "used-MiB/running-actor")
	b.ReportMetric(float64(ateGrowth)/float64(n)/(1<<10), "ate-PSS-KiB/running-actor")
	b.ReportMetric(float64(tasks)/float64(n), "tasks/running-actor")
	b.ReportMetric(startS, "start-s")
	b.ReportMetric(fillS, "fill-s")
	b.ReportMetric(0, "ns/op")
}

// fillRunning creates and answers names in order, four at a time, until
// all run, ctx ends or the machine's available memory falls below
// minFree; it returns how many answered and, if it stopped early, why. A
// failed create or request fails b.
func fillRunning(ctx context.Context, b *testing.B, in *installation, names []string, minFree int64) (int, string) {
	next := make(chan string)
	var answered atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range next {
				if _, err := in.client.CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{Atespace: "default", Name: name, Template: "dense"}}); err != nil {
					errs <- fmt.Errorf("create %s: %w", name, err)
					return
				}
				code, body, _, err := in.request(http.MethodGet, "default/"+name, "/", "")
				if err != nil || code != http.StatusOK {
					errs <- fmt.Errorf("GET %s with %d running = %d %q %v", name, answered.Load(), code, body, err)
					return
				}
				answered.Add(1)
			}
		}()
	}
	why := ""
	var failed error
feed:
	for i, name := range names {
		if i%8 == 0 {
			if avail := memInfo(b, "MemAvailable:"); avail < minFree {
				why = fmt.Sprintf("available memory %d MiB fell below the %d MiB margin", avail>>20, minFree>>20)
				break
			}
			// A running counter is ~50 tasks (sandbox, gofer, stub
			// threads); the kernel's default pid_max, 32768, holds
			// ~600 of them. hack/bench.sh raises it.
			if tasks, limit := taskCount(b); tasks > limit-taskMargin {
				why = fmt.Sprintf("%d tasks on the machine, within %d of kernel.pid_max %d (raise it: sysctl -w kernel.pid_max=4194304)", tasks, taskMargin, limit)
				break
			}
		}
		select {
		case next <- name:
		case failed = <-errs:
			break feed
		case <-ctx.Done():
			why = "deadline: " + ctx.Err().Error()
			break feed
		}
	}
	close(next)
	wg.Wait()
	if failed == nil {
		select {
		case failed = <-errs:
		default:
		}
	}
	if failed != nil {
		b.Fatal(failed)
	}
	return int(answered.Load()), why
}

// taskMargin is how many pids a density run leaves free for the rest of
// the machine.
const taskMargin = 2000

// taskCount returns the number of tasks (threads) on the machine, from
// /proc/loadavg, and kernel.pid_max, which bounds it.
func taskCount(b *testing.B) (tasks, limit int) {
	load, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(load)) // 0.1 0.2 0.3 running/total lastpid
	if len(f) < 4 || !strings.Contains(f[3], "/") {
		b.Fatalf("unexpected /proc/loadavg %q", load)
	}
	_, total, _ := strings.Cut(f[3], "/")
	tasks, _ = strconv.Atoi(total)
	pidMax, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		b.Fatal(err)
	}
	limit, _ = strconv.Atoi(strings.TrimSpace(string(pidMax)))
	return tasks, limit
}

// BenchmarkDensitySuspended holds a real count of suspended counter
// actors (10 000 under `make bench`, 50 under `make test`), created
// through the API: a new actor's snapshot is its template's golden one,
// so creating writes one store record and no snapshot (checked: the
// snapshot store does not grow; ATE_DENSITY_SUSPENDED and
// ATE_DENSITY_SAMPLE change the sizes). A sample (200; 5) spread over them is
// each resumed through the router and suspended again, twice: the first
// resume restores the golden snapshot, the second the actor's own, at
// that count. Reported: the creation rate, both resumes' and the
// suspends' p50/p99, and disk per suspended actor: the sample's own
// snapshots per sampled actor plus the store file per actor (apparent
// size, and allocated blocks).
func BenchmarkDensitySuspended(b *testing.B) {
	total, sample := 50, 5
	if fullBench() {
		total, sample = 10000, 200
	}
	total, sample = envInt(b, "ATE_DENSITY_SUSPENDED", total), envInt(b, "ATE_DENSITY_SAMPLE", sample)
	if sample > total {
		b.Fatalf("a sample of %d out of %d actors: want at most all of them", sample, total)
	}
	in := startUp(b, 4, "--demo")
	ctx := context.Background()
	snaps := filepath.Join(in.dataDir, "snapshots")
	before := dirBytes(b, snaps)
	names := make([]string, total)
	for i := range names {
		names[i] = "idle-" + strconv.Itoa(i+1)
	}
	created := time.Now()
	err := forEach(ctx, names, 16, func(name string) error {
		_, err := in.client.CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{Atespace: "default", Name: name, Template: "counter"}})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	createRate := float64(total) / time.Since(created).Seconds()
	if grown := dirBytes(b, snaps) - before; grown != 0 {
		b.Fatalf("creating %d actors grew the snapshot store by %d bytes, want 0 (they start from the golden snapshot)", total, grown)
	}
	var golden, own, suspends []time.Duration
	cycle := func(name, want string) time.Duration {
		t0 := time.Now()
		code, body, _, err := in.request(http.MethodGet, "default/"+name, "/", "")
		took := time.Since(t0)
		if err != nil || code != http.StatusOK || strings.TrimSpace(body) != want {
			b.Fatalf("GET %s = %d %q %v, want 200 %s", name, code, body, err, want)
		}
		t0 = time.Now()
		if _, err := in.client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: name}); err != nil {
			b.Fatalf("suspend %s: %v", name, err)
		}
		suspends = append(suspends, time.Since(t0))
		return took
	}
	var sampled []string
	for i := 0; i < sample; i++ {
		sampled = append(sampled, names[i*total/sample])
	}
	for b.Loop() {
		for _, name := range sampled {
			golden = append(golden, cycle(name, "count=1"))
		}
		for _, name := range sampled {
			own = append(own, cycle(name, "count=2"))
		}
	}
	snapBytes, snapBlocks := dirBytesBlocks(b, snaps)
	goldenBytes, goldenBlocks := dirBytesBlocks(b, filepath.Join(snaps, goldenRef(b, in)))
	db := filepath.Join(in.dataDir, "ate.db")
	dbBytes, dbBlocks := fileBytes(b, db), fileBlocks(b, db)
	perSnap := float64(snapBytes-goldenBytes) / float64(sample)
	perSnapBlocks := float64(snapBlocks-goldenBlocks) / float64(sample)
	b.ReportMetric(float64(total), "suspended-actors")
	b.ReportMetric(createRate, "created/s")
	latency.Report(b, "golden-resume-", golden, 0.5, 0.99)
	latency.Report(b, "resume-", own, 0.5, 0.99)
	latency.Report(b, "suspend-", suspends, 0.5, 0.99)
	b.ReportMetric((perSnap+float64(dbBytes)/float64(total))/1024, "disk-KiB/suspended-actor")
	b.ReportMetric((perSnapBlocks+float64(dbBlocks)/float64(total))/1024, "disk-blocks-KiB/suspended-actor")
	b.ReportMetric(perSnap/1024, "snapshot-KiB/suspended-actor")
	b.ReportMetric(float64(dbBytes)/float64(total)/1024, "store-KiB/actor")
	b.ReportMetric(0, "ns/op")
}

// forEach calls f on every name, par at a time, and returns the first
// error (the others still run to the end).
func forEach(ctx context.Context, names []string, par int, f func(string) error) error {
	next := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range next {
				if err := f(name); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, name := range names {
		if ctx.Err() != nil {
			break
		}
		next <- name
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// countRunning counts the RUNNING actors whose name starts with prefix.
func countRunning(b *testing.B, in *installation, prefix string) int {
	n, token := 0, ""
	for {
		resp, err := in.client.ListActors(context.Background(), &atev1.ListActorsRequest{Atespace: "default", PageSize: 1000, PageToken: token})
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range resp.GetActors() {
			if strings.HasPrefix(a.GetName(), prefix) && a.GetState() == atev1.ActorState_RUNNING {
				n++
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			return n
		}
	}
}

// deleteActors deletes names (each one's sandbox with it), eight at a
// time, before `ate up` stops: its shutdown would otherwise checkpoint
// every running actor. A missing actor is fine.
func deleteActors(b *testing.B, in *installation, names []string) {
	if in.killed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := forEach(ctx, names, 8, func(name string) error {
		for {
			_, err := in.client.DeleteActor(ctx, &atev1.DeleteActorRequest{Atespace: "default", Name: name, Force: true})
			switch status.Code(err) {
			case codes.OK, codes.NotFound:
				return nil
			case codes.Aborted: // its record moved meanwhile (a request, the idle policy): again
				if ctx.Err() == nil {
					continue
				}
			}
			return fmt.Errorf("delete %s: %w", name, err)
		}
	})
	if err != nil {
		b.Errorf("cleanup: delete the density actors: %v", err)
	}
}

// reapSandboxes kills every runsc process of the installation in
// dataDir (its bundles are there) that is still running after `ate up`
// stopped, so a failed or interrupted run never leaves sandboxes holding
// the machine's memory.
func reapSandboxes(b *testing.B, dataDir string) {
	pids := runscPids(b, dataDir)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(pids) > 0 {
		b.Errorf("cleanup: killed %d runsc processes of %s left running after ate up stopped", len(pids), dataDir)
	}
}

// runscPids lists the runsc sandbox and gofer processes whose command
// line names dataDir.
func runscPids(b *testing.B, dataDir string) []int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cmd), "runsc") || !strings.Contains(string(cmd), dataDir+"/") {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func dirBytes(b *testing.B, dir string) int64 {
	n, _ := dirBytesBlocks(b, dir)
	return n
}

// dirBytesBlocks sums the apparent sizes and the allocated blocks (in
// bytes) of the regular files under dir.
func dirBytesBlocks(b *testing.B, dir string) (size, blocks int64) {
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			size += info.Size()
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				blocks += st.Blocks * 512
			}
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return size, blocks
}

func fileBytes(b *testing.B, p string) int64 {
	info, err := os.Stat(p)
	if err != nil {
		b.Fatal(err)
	}
	return info.Size()
}

// fileBlocks is the space allocated to file p, in bytes.
func fileBlocks(b *testing.B, p string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		b.Fatal(err)
	}
	return st.Blocks * 512
}

// goldenRef is the counter template's golden snapshot reference.
func goldenRef(b *testing.B, in *installation) string {
	tpl, err := in.client.GetActorTemplate(context.Background(), &atev1.GetActorTemplateRequest{Atespace: "default", Name: "counter"})
	if err != nil {
		b.Fatal(err)
	}
	return snapshot.Bare(tpl.GetStatus().GetGoldenSnapshot())
}

// runscMemory sums the resident (RSS) and proportional (PSS) memory of
// the runsc sandbox and gofer processes of the installation in dataDir
// and of their systrap stub processes, in bytes. A stub process holds an
// application address space; the stubs it forks share its memory map
// (their smaps are the same pages), so only direct children of a runsc
// process are counted.
func runscMemory(b *testing.B, dataDir string) (rss, pss int64) {
	runsc := runscPids(b, dataDir)
	pids := append(slices.Clone(runsc), childrenOf(b, runsc)...)
	for _, pid := range pids {
		r, p, ok := smapsRollup(pid)
		if ok { // else it exited meanwhile
			rss, pss = rss+r, pss+p
		}
	}
	if pss == 0 {
		b.Fatal("found no runsc sandbox or gofer process of this installation to weigh")
	}
	return rss, pss
}

// runscTasks counts the threads of the runsc processes of the
// installation in dataDir and of all their descendants (stubs).
func runscTasks(b *testing.B, dataDir string) int {
	n := 0
	for gen := runscPids(b, dataDir); len(gen) > 0; gen = childrenOf(b, gen) {
		for _, pid := range gen {
			tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
			if err == nil {
				n += len(tasks)
			}
		}
	}
	return n
}

// childrenOf lists the processes whose parent is one of parents.
func childrenOf(b *testing.B, parents []int) []int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	var kids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); slices.Contains(parents, ppid) {
			kids = append(kids, pid)
		}
	}
	return kids
}

// procPSS is process pid's PSS in bytes.
func procPSS(b *testing.B, pid int) int64 {
	_, pss, ok := smapsRollup(pid)
	if !ok {
		b.Fatalf("cannot read /proc/%d/smaps_rollup", pid)
	}
	return pss
}

// smapsRollup reads a process's RSS and PSS in bytes.
func smapsRollup(pid int) (rss, pss int64, ok bool) {
	rollup, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return 0, 0, false
	}
	for _, l := range strings.Split(string(rollup), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Rss:":
			rss += kb << 10
		case "Pss:":
			pss += kb << 10
		}
	}
	return rss, pss, true
}

// memInfo returns the /proc/meminfo field key (e.g. "MemAvailable:") in
// bytes.
func memInfo(b *testing.B, key string) int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == key {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/meminfo", key)
	return 0
}
