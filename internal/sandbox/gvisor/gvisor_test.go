package gvisor

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"substrate.dev/ate/internal/netns"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/snapshot"
)

// counterPort is where testdata/counter listens inside the sandbox.
const counterPort = 8080

// testDir holds what all tests share (the counter rootfs); made in TestMain.
var testDir string

// hostNetNS is the network namespace the test process started in
// (readlink of /proc/self/ns/net), read in TestMain before any test made
// a namespace.
var hostNetNS string

func TestMain(m *testing.M) {
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hostNetNS = ns
	dir, err := os.MkdirTemp("", "ate-gvisor-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// rootFS builds testdata/counter as a static binary into a root filesystem
// holding nothing else (runsc's overlay provides the mount points), once
// per test binary.
var rootFS = sync.OnceValues(func() (string, error) {
	root := filepath.Join(testDir, "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(root, "counter"), "./testdata/counter")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build counter: %w\n%s", err, out)
	}
	return root, nil
})

// newRuntime returns a Runtime on the real runsc binary with its own
// state dir, and checks in cleanup that the test left no container behind.
// A missing runsc fails the test: these tests are the proof the runtime
// works, so they must not pass by skipping.
func newRuntime(t testing.TB) *Runtime {
	t.Helper()
	return newRuntimeWith(t, Config{})
}

// newRuntimeWith is newRuntime with cfg's flags.
func newRuntimeWith(t testing.TB, cfg Config) *Runtime {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("gvisor tests need root (runsc and network namespaces)")
	}
	path := os.Getenv("RUNSC")
	if path == "" {
		path = DefaultRunscPath()
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("runsc not found at %s (%v): install it with `bash hack/install-runsc.sh`, or set RUNSC=/path/to/runsc", path, err)
	}
	cfg.RunscPath, cfg.RootDir = path, t.TempDir()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		out, err := r.command(context.Background(), "list", "-quiet")
		if err != nil {
			t.Errorf("runsc list: %v", err)
		} else if ids := strings.Fields(string(out)); len(ids) > 0 {
			t.Errorf("containers left behind: %v", ids)
			for _, id := range ids {
				r.Destroy(context.Background(), sandbox.Slot{}, id)
			}
		}
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if _, err := os.Stat(r.rootDir); !os.IsNotExist(err) {
			t.Errorf("RootDir %s still exists after Close (stat err %v)", r.rootDir, err)
		}
	})
	return r
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newSlot ensures a worker with a unique name, removed in cleanup.
func newSlot(t testing.TB) sandbox.Slot {
	t.Helper()
	slot, err := netns.Ensure(t.Context(), "atet-"+randHex(3))
	if err != nil {
		t.Fatalf("netns.Ensure: %v", err)
	}
	t.Cleanup(func() {
		if err := netns.Remove(context.Background(), slot); err != nil {
			t.Errorf("netns.Remove: %v", err)
		}
	})
	return slot
}

// checkGone fails t unless runsc reports container id as unknown (and
// not merely fails to answer), when says at which step.
func checkGone(t *testing.T, r *Runtime, id, when string) {
	t.Helper()
	_, err := r.command(t.Context(), "state", id)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("container %s %s: runsc state = %v, want \"does not exist\"", id, when, err)
	}
}

// checkThreadsInHostNetNS fails t if any thread of this process is in a
// network namespace other than the one it started in. runsc's restore
// joins the sandbox's namespace on a thread and then returns that thread
// to the process's namespace (/proc/self/ns/net, the main thread's), so a
// main thread left in a worker's namespace sends threads there too, and
// loopback dials from them are refused.
func checkThreadsInHostNetNS(t *testing.T) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		ns, err := os.Readlink(filepath.Join("/proc/self/task", task.Name(), "ns/net"))
		if err != nil {
			continue // the thread has exited
		}
		if ns != hostNetNS {
			t.Errorf("thread %s is in network namespace %s, the process started in %s", task.Name(), ns, hostNetNS)
		}
	}
}

// newSpec returns a counter container spec with a fresh ID whose Destroy
// is registered for cleanup (registered before the slot's, so it runs
// first).
func newSpec(t testing.TB, r *Runtime) sandbox.Spec {
	t.Helper()
	root, err := rootFS()
	if err != nil {
		t.Fatal(err)
	}
	id := "c-" + randHex(4)
	dir := t.TempDir()
	t.Cleanup(func() {
		if err := r.Destroy(context.Background(), sandbox.Slot{}, id); err != nil {
			t.Errorf("Destroy(%s): %v", id, err)
		}
	})
	return sandbox.Spec{
		ID:        id,
		RootFS:    root,
		Args:      []string{"/counter"},
		LogPath:   filepath.Join(dir, "out.log"),
		BundleDir: filepath.Join(dir, "bundle"),
	}
}

// get does one HTTP GET of path against the counter in slot, on a
// connection it dials itself so that no dial outlives the call (an
// http.Transport would finish a timed-out dial in the background).
func get(ctx context.Context, r *Runtime, slot sandbox.Slot, path string) (string, error) {
	return getWithin(ctx, r, slot, path, 2*time.Second)
}

// getWithin is get bounded by timeout instead of 2 s.
func getWithin(ctx context.Context, r *Runtime, slot sandbox.Slot, path string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := r.DialContext(ctx, slot, counterPort)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://sandbox"+path, nil)
	if err != nil {
		return "", err
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return strings.TrimSpace(string(b)), nil
}

// shortCtx bounds a GET expected to fail: with nothing owning the interior
// address, ARP goes unanswered and a dial would wait out get's timeout.
func shortCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// mustGet is get that fails the test.
func mustGet(t testing.TB, r *Runtime, slot sandbox.Slot, path string) string {
	t.Helper()
	s, err := get(t.Context(), r, slot, path)
	if err != nil {
		t.Fatalf("GET %s in %s: %v", path, slot.Name, err)
	}
	return s
}

// waitReady polls /healthz until it answers or 15 s pass, and returns how
// long that took. Each try is bounded and the interval short, so the poll
// adds little to what benchmarks measure with it.
func waitReady(t testing.TB, r *Runtime, slot sandbox.Slot) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		_, err := get(ctx, r, slot, "/healthz")
		cancel()
		if err == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("counter in %s not ready after 15s: %v", slot.Name, err)
		}
		time.Sleep(2 * time.Millisecond) // poll interval, not synchronisation
	}
}

// listDir returns "name size mode mtime" for every entry of dir, to show
// the host RootFS is untouched.
func listDir(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d %v %v", p, fi.Size(), fi.Mode(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runReady runs spec in slot and waits for it to serve.
func runReady(t testing.TB, r *Runtime, slot sandbox.Slot, spec sandbox.Spec) {
	t.Helper()
	start := time.Now()
	if err := r.Run(t.Context(), slot, spec); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ran := time.Since(start)
	ready := waitReady(t, r, slot)
	t.Logf("run %v, first answer %v after run returned", ran, ready)
}

// checkpoint checkpoints id into a fresh image dir and returns it.
func checkpoint(t testing.TB, r *Runtime, slot sandbox.Slot, id string) string {
	t.Helper()
	img := t.TempDir()
	start := time.Now()
	if err := r.Checkpoint(t.Context(), slot, id, img); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	t.Logf("checkpoint %v", time.Since(start))
	return img
}

func TestRunCheckpointRestoreIntoAnotherSlot(t *testing.T) {
	r := newRuntime(t)
	w1, w2 := newSlot(t), newSlot(t)
	spec := newSpec(t, r)
	before := listDir(t, spec.RootFS)

	runReady(t, r, w1, spec)
	for want := 1; want <= 3; want++ {
		if got := mustGet(t, r, w1, "/"); got != fmt.Sprint(want) {
			t.Fatalf("counter = %s, want %d", got, want)
		}
	}
	mustGet(t, r, w1, "/write?v=kept")
	if got := mustGet(t, r, w1, "/read"); got != "kept" {
		t.Fatalf("/read before checkpoint = %q", got)
	}

	img := checkpoint(t, r, w1, spec.ID)
	if _, err := get(shortCtx(t), r, w1, "/healthz"); err == nil {
		t.Fatal("w1 still answers after Checkpoint; the slot should be empty")
	}
	checkGone(t, r, spec.ID, "after Checkpoint")

	restored := newSpec(t, r)
	start := time.Now()
	if err := r.Restore(t.Context(), w2, restored, img); err != nil {
		t.Fatalf("Restore into %s: %v", w2.Name, err)
	}
	t.Logf("restore %v", time.Since(start))
	if got := mustGet(t, r, w2, "/"); got != "4" {
		t.Fatalf("counter after restore = %s, want 4 (memory lost?)", got)
	}
	t.Logf("restore to first answer %v", time.Since(start))
	if got := mustGet(t, r, w2, "/read"); got != "kept" {
		t.Fatalf("/read after restore = %q, want the file written before checkpoint", got)
	}
	if after := listDir(t, spec.RootFS); !equal(before, after) {
		t.Fatalf("host RootFS changed:\nbefore %v\nafter  %v", before, after)
	}
	if b, err := os.ReadFile(spec.LogPath); err != nil || !strings.Contains(string(b), "counter listening") {
		t.Fatalf("container stdout not in LogPath: %q, %v", b, err)
	}
	if err := r.Destroy(t.Context(), w2, restored.ID); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
}

func equal(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

func TestCorruptImageFailsRestoreAndLeavesSlotUsable(t *testing.T) {
	r := newRuntime(t)
	w := newSlot(t)
	img := countedOnce(t, r, w)

	// Overwrite part of the state file; pages alone might restore "fine".
	f, err := os.OpenFile(filepath.Join(img, "checkpoint.img"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 4096)
	rand.Read(junk)
	if _, err := f.WriteAt(junk, 64); err != nil {
		t.Fatal(err)
	}
	f.Close()

	bad := newSpec(t, r)
	err = r.Restore(t.Context(), w, bad, img)
	if !errors.Is(err, sandbox.ErrRestoreFailed) {
		t.Fatalf("Restore of a corrupt image: err = %v, want ErrRestoreFailed", err)
	}
	t.Logf("restore error: %v", err)
	checkGone(t, r, bad.ID, "after its restore failed")

	next := newSpec(t, r)
	runReady(t, r, w, next)
	if got := mustGet(t, r, w, "/"); got != "1" {
		t.Fatalf("fresh counter after failed restore = %s, want 1", got)
	}
}

func TestRestoreFromMissingImageFails(t *testing.T) {
	r := newRuntime(t)
	w := newSlot(t)
	spec := newSpec(t, r)
	err := r.Restore(t.Context(), w, spec, filepath.Join(t.TempDir(), "absent"))
	if !errors.Is(err, sandbox.ErrRestoreFailed) {
		t.Fatalf("err = %v, want ErrRestoreFailed", err)
	}
}

func TestRunFailureIsActionableAndSlotStaysUsable(t *testing.T) {
	r := newRuntime(t)
	w := newSlot(t)
	spec := newSpec(t, r)
	spec.Args = []string{"/no-such-binary"}
	err := r.Run(t.Context(), w, spec)
	if err == nil {
		t.Fatal("Run of a missing binary succeeded")
	}
	t.Logf("run error: %v", err)
	if !strings.Contains(err.Error(), "no-such-binary") {
		t.Errorf("error does not say what failed: %v", err)
	}
	runReady(t, r, w, newSpec(t, r))
}

func TestDestroyIsIdempotent(t *testing.T) {
	r := newRuntime(t)
	w := newSlot(t)
	if err := r.Destroy(t.Context(), w, "never-existed"); err != nil {
		t.Fatalf("Destroy of unknown id: %v", err)
	}
	spec := newSpec(t, r)
	runReady(t, r, w, spec)
	for i := range 2 {
		if err := r.Destroy(t.Context(), w, spec.ID); err != nil {
			t.Fatalf("Destroy #%d: %v", i+1, err)
		}
	}
	if _, err := get(shortCtx(t), r, w, "/healthz"); err == nil {
		t.Fatal("counter still answers after Destroy")
	}
}

func TestRunHonoursCancelledContext(t *testing.T) {
	r := newRuntime(t)
	w := newSlot(t)
	spec := newSpec(t, r)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.Run(ctx, w, spec); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with cancelled ctx: err = %v, want context.Canceled", err)
	}
}

func TestNewWithoutRunscSaysHowToInstall(t *testing.T) {
	_, err := New(Config{RunscPath: filepath.Join(t.TempDir(), "runsc"), RootDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "hack/install-runsc.sh") {
		t.Fatalf("New with missing runsc: err = %v", err)
	}
}

func TestDefaultRunscPath(t *testing.T) {
	for _, tc := range []struct {
		name, cache, home, want string
	}{
		{"ATE_CACHE wins", "/c", "/h", "/c/bin/runsc"},
		{"HOME fallback", "", "/h", "/h/.cache/ate/bin/runsc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ATE_CACHE", tc.cache)
			t.Setenv("HOME", tc.home)
			if got := DefaultRunscPath(); got != tc.want {
				t.Fatalf("DefaultRunscPath() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPreparedRestoreAndRun: a container created ahead of time (a node's
// standby) takes a restore that keeps the checkpoint's memory and files, or
// a plain start; a restore of a corrupt image into one fails as a restore
// failure and leaves nothing behind; Destroy removes a prepared container
// that never started. Both ways of driving runsc are checked: the library
// in process (the default with the installed runsc) and the command.
func TestPreparedRestoreAndRun(t *testing.T) {
	for _, cli := range []bool{false, true} {
		t.Run(map[bool]string{false: "library", true: "cli"}[cli], func(t *testing.T) {
			r := newRuntimeWith(t, Config{ForceCLI: cli})
			if usesLib := r.lib != nil; usesLib == cli {
				t.Fatalf("ForceCLI=%v: runtime uses the library = %v (is the runsc stamp %s?)", cli, usesLib, RunscVersion)
			}
			testPreparedRestoreAndRun(t, r)
		})
	}
}

func testPreparedRestoreAndRun(t *testing.T, r *Runtime) {
	w1, w2 := newSlot(t), newSlot(t)
	spec := newSpec(t, r)
	runReady(t, r, w1, spec)
	mustGet(t, r, w1, "/")
	mustGet(t, r, w1, "/write?v=kept")
	img := checkpoint(t, r, w1, spec.ID)

	standby := newPrepared(t, r, w2)
	if _, err := get(shortCtx(t), r, w2, "/healthz"); err == nil {
		t.Fatal("a prepared container answers before it was started")
	}
	if err := r.Restore(t.Context(), w2, standby, img); err != nil {
		t.Fatalf("Restore into prepared: %v", err)
	}
	if got := mustGet(t, r, w2, "/"); got != "2" {
		t.Fatalf("counter after restore into prepared = %s, want 2", got)
	}
	if got := mustGet(t, r, w2, "/read"); got != "kept" {
		t.Fatalf("/read after restore into prepared = %q, want kept", got)
	}
	checkThreadsInHostNetNS(t)
	if err := r.Destroy(t.Context(), w2, standby.ID); err != nil {
		t.Fatal(err)
	}

	fresh := newPrepared(t, r, w1)
	if err := r.Run(t.Context(), w1, fresh); err != nil {
		t.Fatalf("Run prepared: %v", err)
	}
	waitReady(t, r, w1) // a started container boots; it does not answer at once
	if got := mustGet(t, r, w1, "/"); got != "1" {
		t.Fatalf("counter of a started prepared container = %s, want 1", got)
	}
	if err := r.Destroy(t.Context(), w1, fresh.ID); err != nil {
		t.Fatal(err)
	}

	corrupt := filepath.Join(t.TempDir(), "corrupt")
	if err := snapshot.CopyTree(corrupt, img, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(corrupt, "checkpoint.img"), []byte("not a state file"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := newPrepared(t, r, w2)
	if err := r.Restore(t.Context(), w2, bad, corrupt); !errors.Is(err, sandbox.ErrRestoreFailed) {
		t.Fatalf("Restore of a corrupt image into prepared: err = %v, want ErrRestoreFailed", err)
	}
	checkGone(t, r, bad.ID, "after its restore into prepared failed")

	unused := newPrepared(t, r, w1)
	if err := r.Destroy(t.Context(), w1, unused.ID); err != nil {
		t.Fatalf("Destroy prepared: %v", err)
	}
	checkGone(t, r, unused.ID, "after Destroy of a prepared container")
}

// TestPrepareBesideCheckpoint: a standby may be created in the slot of a
// container frozen for its checkpoint, while the checkpoint runs (the
// node overlaps an eviction's `runsc create` with the victim's
// checkpoint); the frozen container's checkpoint then restores into it
// with its state, and a fresh boot into it serves too.
func TestPrepareBesideCheckpoint(t *testing.T) {
	for _, restore := range []bool{true, false} {
		t.Run(map[bool]string{true: "restore", false: "boot"}[restore], func(t *testing.T) {
			r := newRuntime(t)
			w := newSlot(t)
			spec := newSpec(t, r)
			runReady(t, r, w, spec)
			mustGet(t, r, w, "/")
			mustGet(t, r, w, "/write?v=kept")
			if err := r.Freeze(t.Context(), w, spec.ID); err != nil {
				t.Fatalf("Freeze: %v", err)
			}
			standby := newSpec(t, r)
			prepared := make(chan error, 1)
			go func() { prepared <- r.Prepare(t.Context(), w, standby) }()
			img := checkpoint(t, r, w, spec.ID)
			if err := <-prepared; err != nil {
				t.Fatalf("Prepare beside a checkpoint: %v", err)
			}
			standby.Prepared = true
			if !restore {
				if err := r.Run(t.Context(), w, standby); err != nil {
					t.Fatalf("Run in the standby prepared beside the checkpoint: %v", err)
				}
				waitReady(t, r, w)
				if got := mustGet(t, r, w, "/"); got != "1" {
					t.Fatalf("counter of a fresh boot = %s, want 1", got)
				}
			} else {
				if err := r.Restore(t.Context(), w, standby, img); err != nil {
					t.Fatalf("Restore into the standby prepared beside the checkpoint: %v", err)
				}
				if got := mustGet(t, r, w, "/"); got != "2" {
					t.Fatalf("counter after the restore = %s, want 2", got)
				}
				if got := mustGet(t, r, w, "/read"); got != "kept" {
					t.Fatalf("/read after the restore = %q, want kept", got)
				}
			}
			if err := r.Destroy(t.Context(), w, standby.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// countedOnce runs a counter in w, counts once and checkpoints it; it
// returns the image, whose next count is 2.
func countedOnce(t testing.TB, r *Runtime, w sandbox.Slot) string {
	t.Helper()
	spec := newSpec(t, r)
	runReady(t, r, w, spec)
	mustGet(t, r, w, "/")
	return checkpoint(t, r, w, spec.ID)
}

// newPrepared is newSpec created in slot by Prepare, with Prepared set.
func newPrepared(t testing.TB, r *Runtime, slot sandbox.Slot) sandbox.Spec {
	t.Helper()
	spec := newSpec(t, r)
	if err := r.Prepare(t.Context(), slot, spec); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	spec.Prepared = true
	return spec
}

// TestSeccompIsPrecompiled: the runsc that hack/install-runsc.sh builds
// carries precompiled seccomp programs for the configuration we run, so no
// sandbox start pays for compiling its filter (~22 ms). runsc says which
// way it went in its debug log.
func TestSeccompIsPrecompiled(t *testing.T) {
	logDir := t.TempDir()
	r := newRuntimeWith(t, Config{ExtraFlags: []string{"--debug", "--debug-log=" + logDir + "/"}})
	slot := newSlot(t)
	spec := newSpec(t, r)
	runReady(t, r, slot, spec)
	if err := r.Destroy(t.Context(), slot, spec.ID); err != nil {
		t.Fatal(err)
	}
	boots, err := filepath.Glob(filepath.Join(logDir, "*.boot.txt"))
	if err != nil || len(boots) == 0 {
		t.Fatalf("no boot debug log in %s (%v)", logDir, err)
	}
	log, err := os.ReadFile(boots[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "Loaded precompiled seccomp instructions") {
		t.Fatalf("runsc compiled its seccomp filter at start (rebuild it with `bash hack/install-runsc.sh`); boot log says:\n%s",
			grepLines(string(log), "seccomp"))
	}
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) && len(out) < 10 {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestLibraryIsRunscVersion: the gvisor module this package links (its
// go.mod requirement) is the version of the runsc binary it drives
// (RunscVersion, which hack/install-runsc.sh installs).
func TestLibraryIsRunscVersion(t *testing.T) {
	gomod, err := os.ReadFile("../../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := "gvisor.dev/gvisor " + RunscVersion + "\n"
	if !strings.Contains(string(gomod), want) {
		t.Fatalf("go.mod does not require %q: keep RunscVersion and the module requirement equal", strings.TrimSpace(want))
	}
}

// TestPreparedRestoreHonoursCancelledContext: a restore into a prepared
// container whose context ends midway returns the context's error as a
// restore failure, leaves no container behind and the slot usable, also
// when runsc's library runs it in this process (where nothing kills a
// runsc command for us).
func TestPreparedRestoreHonoursCancelledContext(t *testing.T) {
	r := newRuntime(t)
	if r.lib == nil {
		t.Fatalf("the runtime does not use runsc's library (is the runsc stamp %s?)", RunscVersion)
	}
	w := newSlot(t)
	img := countedOnce(t, r, w)

	standby := newPrepared(t, r, w)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
	defer cancel()
	err := r.Restore(ctx, w, standby, img)
	if !errors.Is(err, sandbox.ErrRestoreFailed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Restore with a 5 ms deadline: err = %v, want ErrRestoreFailed and DeadlineExceeded", err)
	}
	checkGone(t, r, standby.ID, "after its restore was cancelled")
	next := newPrepared(t, r, w)
	if err := r.Restore(t.Context(), w, next, img); err != nil {
		t.Fatalf("restore after a cancelled one: %v", err)
	}
	if got := mustGet(t, r, w, "/"); got != "2" {
		t.Fatalf("counter after restore = %s, want 2", got)
	}
}

// TestDestroyAllEndsPredecessorsCommands: a node killed while a runsc
// command of its own ran (a standby's create) leaves that command
// running, and it would make a container after the next start-up's
// DestroyAll listed them. DestroyAll ends every process of its root
// first, and none of another root.
func TestDestroyAllEndsPredecessorsCommands(t *testing.T) {
	r := newRuntime(t)
	start := func(root string) *exec.Cmd {
		// A stand-in for `runsc --root ROOT create …` that never ends:
		// the shell itself waits (read is a builtin) on a pipe no one
		// writes, so no child outlives it.
		cmd := exec.Command("sh", "-c", "read x", "runsc", "--root", root, "create")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = stdin.Close() })
		return cmd
	}
	mine, other := start(r.rootDir), start(r.rootDir+"-other")
	exited := make(chan error, 1)
	go func() { exited <- mine.Wait() }()
	if err := r.DestroyAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("a process of the root still runs after DestroyAll")
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("a process of another root was ended: %v", err)
	}
	_ = other.Process.Kill()
	_ = other.Wait()
}

// TestDestroyAllRemovesAKilledCreatesFiles: a node SIGKILLed while
// `runsc create` ran for a standby left that sandbox's lock and control
// socket but no container state, so no list names it (seen in e2e
// TestNodeAgentKilledDuringSuspend: the root outlived the next clean
// exit). The next start-up's DestroyAll removes them, and a live
// container's files are not touched before it is destroyed.
func TestDestroyAllRemovesAKilledCreatesFiles(t *testing.T) {
	r := newRuntime(t)
	left := []string{"ate-standby-d86b55b6_sandbox:ate-standby-d86b55b6.lock", "runsc-ate-standby-d86b55b6.sock"}
	for _, name := range left {
		if err := os.WriteFile(filepath.Join(r.rootDir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.DestroyAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, name := range left {
		if _, err := os.Stat(filepath.Join(r.rootDir, name)); !os.IsNotExist(err) {
			t.Errorf("%s still under the root after DestroyAll (stat: %v)", name, err)
		}
	}
	// The root is usable afterwards.
	runReady(t, r, newSlot(t), newSpec(t, r))
}

// TestNothingStartsAfterClose: a start that raced its node's exit must
// neither run nor make the runsc root Close removed again.
func TestNothingStartsAfterClose(t *testing.T) {
	r := newRuntime(t)
	w := newSlot(t)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(sandbox.Spec) error{
		"Run":     func(s sandbox.Spec) error { return r.Run(t.Context(), w, s) },
		"Prepare": func(s sandbox.Spec) error { return r.Prepare(t.Context(), w, s) },
		"Restore": func(s sandbox.Spec) error { return r.Restore(t.Context(), w, s, t.TempDir()) },
	} {
		if err := call(newSpec(t, r)); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
		if _, err := os.Stat(r.rootDir); !os.IsNotExist(err) {
			t.Fatalf("%s after Close: runsc root %s exists again (stat: %v)", name, r.rootDir, err)
		}
	}
}
