package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/latency"
	"substrate.dev/ate/internal/sandbox"
)

// fullBench reports whether benchmarks run at full size: `make bench`
// (hack/bench.sh) sets ATE_BENCH_SCALE=full; `make test` runs one
// iteration of each at a small size.
func fullBench() bool { return os.Getenv("ATE_BENCH_SCALE") == "full" }

// pythonImage is the python-notes example image that
// `bash hack/build-examples.sh python-notes` packs, relative to this
// package.
const pythonImage = "../../../build/images/python-notes"

// pythonRootFS unpacks the python-notes image once per test binary and
// returns its root filesystem and environment.
var pythonRootFS = sync.OnceValues(func() (*image.Image, error) {
	dir, err := filepath.Abs(pythonImage)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		return nil, fmt.Errorf("python-notes image: %w (build it with `bash hack/build-examples.sh python-notes`)", err)
	}
	return image.NewCache(filepath.Join(testDir, "images"), nil).Ensure(context.Background(), "oci:"+dir)
})

// newPythonSpec returns a python-notes container spec holding stateMB MiB
// of live state, with a fresh ID whose Destroy is registered for cleanup.
func newPythonSpec(t testing.TB, r *Runtime, stateMB int) sandbox.Spec {
	t.Helper()
	img, err := pythonRootFS()
	if err != nil {
		t.Fatal(err)
	}
	spec := newSpec(t, r)
	spec.RootFS = img.RootFS
	spec.Args = []string{"/usr/bin/python3", "/app/notes.py"}
	spec.Env = append(append([]string(nil), img.Config.Env...), fmt.Sprintf("STATE_MB=%d", stateMB))
	return spec
}

// debugLogEnv names a directory for runsc's debug logs of the benchmarks'
// runtimes (one *.boot.txt per sandbox, with runsc's own restore
// timeline); unset, none are written.
const debugLogEnv = "ATE_BENCH_RUNSC_DEBUG_LOG"

// debugConfig is cfg with runsc's debug log in $ATE_BENCH_RUNSC_DEBUG_LOG
// when that is set.
func debugConfig(cfg Config) Config {
	if dir := os.Getenv(debugLogEnv); dir != "" {
		cfg.ExtraFlags = append(cfg.ExtraFlags, "--debug", "--debug-log="+dir+"/")
	}
	return cfg
}

// pythonStateSizes are the STATE_MB values BenchmarkRestore measures:
// 64 MiB always, 256 MiB too at full size.
func pythonStateSizes() []int {
	if fullBench() {
		return []int{64, 256}
	}
	return []int{64}
}

// imageVariant is the image options and page cache state BenchmarkRestore compares on
// python-notes; "default" is the zero ImageOptions, what a node uses.
type imageVariant struct {
	name string
	img  ImageOptions
	// coldCache drops the image from the page cache before each
	// restore, as for an actor suspended long enough for its snapshot to
	// be evicted: the restore then reads it from the disk.
	coldCache bool
}

// pythonVariants are the image variants measured at stateMB: the
// default and the background restore; at full size and 64 MiB also
// zero-page exclusion. A compressed image is left out: it restored
// 64 MiB in ~3.5 s (BENCHMARKS.md, Restoring interpreters), minutes for
// 30 iterations; the counter's Restore/compressed keeps the option
// exercised.
func pythonVariants(stateMB int) []imageVariant {
	vs := []imageVariant{
		{"default", ImageOptions{}, false},
		{"background", ImageOptions{Background: true}, false},
	}
	if fullBench() && stateMB <= 64 {
		vs = append(vs,
			imageVariant{"zero-pages-excluded", ImageOptions{ExcludeZeroPages: true}, false},
			imageVariant{"cold-cache", ImageOptions{}, true})
	}
	return vs
}

// benchPythonRestore boots python-notes with stateMB MiB of state in a
// runtime with img, checkpoints it once (reported as ckpt-ms) and then,
// per iteration, restores that image into a prepared container (a node's
// standby) and times the restore until /healthz answers (p50/p95/p99-ms:
// the first byte an activation waits for) and until /checksum answers
// (checksum-p*-ms: every page of the state read back). Each restore's
// checksum must equal the one taken before the checkpoint. Two figures
// that the machine's load does not change much go with them: the CPU
// time the sandbox process spent until the first answer (sandbox-cpu-ms)
// and the image bytes it had read by then (read-MiB; disk-MiB of them
// from the disk rather than the page cache), all per restore.
func benchPythonRestore(b *testing.B, stateMB int, v imageVariant) {
	r := newRuntimeWith(b, debugConfig(Config{Images: v.img}))
	slot := newSlot(b)
	spec := newPythonSpec(b, r, stateMB)
	if err := r.Run(b.Context(), slot, spec); err != nil {
		b.Fatalf("Run: %v", err)
	}
	waitReady(b, r, slot)
	want := checksum(b, r, slot)
	imgDir := b.TempDir()
	t0 := time.Now()
	if err := r.Checkpoint(b.Context(), slot, spec.ID, imgDir); err != nil {
		b.Fatalf("Checkpoint: %v", err)
	}
	ckpt := time.Since(t0)

	var first, full []time.Duration
	var cpu time.Duration
	var read, disk int64
	for b.Loop() {
		b.StopTimer()
		restored := newPythonSpec(b, r, stateMB)
		if err := r.Prepare(b.Context(), slot, restored); err != nil {
			b.Fatalf("Prepare: %v", err)
		}
		restored.Prepared = true
		if v.coldCache {
			dropCache(b, imgDir)
		}
		pid, err := r.sandboxPID(b.Context(), restored.ID)
		if err != nil {
			b.Fatal(err)
		}
		cpu0 := processCPU(b, pid)
		read0, disk0 := processRead(b, pid)
		b.StartTimer()
		t0 := time.Now()
		if err := r.Restore(b.Context(), slot, restored, imgDir); err != nil {
			b.Fatal(err)
		}
		waitReady(b, r, slot)
		first = append(first, time.Since(t0))
		cpu += processCPU(b, pid) - cpu0
		read1, disk1 := processRead(b, pid)
		read, disk = read+read1-read0, disk+disk1-disk0
		if got := checksum(b, r, slot); got != want {
			b.Fatalf("checksum after restore = %s, want %s (state lost)", got, want)
		}
		full = append(full, time.Since(t0))
		b.StopTimer()
		if err := r.Destroy(context.Background(), slot, restored.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	latency.Report(b, "", first, 0.50, 0.95, 0.99)
	latency.Report(b, "checksum-", full, 0.50, 0.95)
	b.ReportMetric(latency.Ms(cpu)/float64(len(first)), "sandbox-cpu-ms")
	b.ReportMetric(float64(read)/float64(len(first))/(1<<20), "read-MiB")
	b.ReportMetric(float64(disk)/float64(len(first))/(1<<20), "disk-MiB")
	b.ReportMetric(latency.Ms(ckpt), "ckpt-ms")
	b.ReportMetric(float64(dirBytes(b, imgDir))/(1<<20), "image-MiB")
	b.ReportMetric(0, "ns/op")
}

// dropCache writes the files in dir to the disk and drops them from the
// page cache (fsync, then posix_fadvise DONTNEED).
func dropCache(b *testing.B, dir string) {
	b.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			b.Fatal(err)
		}
		err = f.Sync()
		if err == nil {
			err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		}
		f.Close()
		if err != nil {
			b.Fatalf("drop %s from the page cache: %v", e.Name(), err)
		}
	}
}

// processCPU returns the CPU time (user and system, all threads) process
// pid has used, from /proc/<pid>/stat, in clock ticks of 10 ms: what a
// restore costs whatever else the machine runs.
func processCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which ends with the last ')':
	// state is the first, utime and stime the 12th and 13th.
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	if i < 0 || len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// processRead returns the bytes process pid has read with read system
// calls, page cache hits included (rchar in /proc/<pid>/io), and those
// of them that came from the disk (read_bytes).
func processRead(b *testing.B, pid int) (all, disk int64) {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		b.Fatal(err)
	}
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		name, v, ok := strings.Cut(line, ": ")
		if !ok || (name != "rchar" && name != "read_bytes") {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/io: %q", pid, line)
		}
		if name == "rchar" {
			all = n
		} else {
			disk = n
		}
		found++
	}
	if found != 2 {
		b.Fatalf("/proc/%d/io lacks rchar or read_bytes: %q", pid, data)
	}
	return all, disk
}

// checksum returns python-notes' /checksum answer.
func checksum(b *testing.B, r *Runtime, slot sandbox.Slot) string {
	b.Helper()
	s, err := getWithin(b.Context(), r, slot, "/checksum", 30*time.Second)
	if err != nil {
		b.Fatalf("GET /checksum: %v", err)
	}
	return s
}
