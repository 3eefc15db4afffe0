// Package gvisor is the default sandbox class: it runs, checkpoints and
// restores containers with gVisor's runsc binary, one sandbox per worker
// slot, each in the slot's network namespace (internal/netns). Operations
// on a container that exists (start and restore of a prepared one,
// checkpoint, delete, its sandbox's pid) go through runsc's own library in
// this process instead of the command (library.go); creating one runs the
// command.
//
// Flags given to every runsc command, and why:
//
//	--root RootDir          runsc's container state lives under our data
//	                        directory, not /var/run/runsc, so several
//	                        Runtimes (tests, nodes) never see each other's
//	                        containers.
//	--network=sandbox       gVisor's own network stack takes over the slot's
//	                        eth0 (169.254.17.2/30), so the address moves with
//	                        a checkpoint.
//	--overlay2=root:memory  root filesystem writes go to an overlay held in
//	                        sandbox memory: they are saved by checkpoint and
//	                        the shared host RootFS is never written. The
//	                        default, root:self, creates a .gvisor.filestore.ID
//	                        file inside the host RootFS directory.
//
// Checkpoint images (ImageOptions, docs/restore.md "Checkpoint images and
// restore speed"): uncompressed, so memory pages sit apart in a
// page-aligned pages.img that a restore reads in parallel; committed
// zero pages kept; written and read through the page cache, never with
// O_DIRECT; and restored in the foreground, the restore returning once
// every page is in (background loading did not pay on 2 cores).
//
// What each operation costs, as measured by this package's benchmarks
// (`go test -bench . ./internal/sandbox/gvisor/`), is in BENCHMARKS.md,
// "Latest make bench" (ColdBoot/*, Restore/*) and "Activation latency":
// a start or restore into a prepared container costs well under half of
// one that creates its sandbox, and the library beats the command.
package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"substrate.dev/ate/internal/netns"
	"substrate.dev/ate/internal/sandbox"
)

// RunscVersion is the gvisor.dev/gvisor module version of the runsc binary
// this package drives. It must equal go.mod's requirement, from which
// hack/install-runsc.sh builds runsc (TestLibraryIsRunscVersion checks;
// a test binary's build info lists no dependencies, so it is not read at
// run time). Such a build prints VERSION_MISSING for --version, so the
// script records the version in a stamp file beside the binary.
const RunscVersion = "v0.0.0-20260905035102-160fafc42237"

// cleanupTimeout bounds the force-delete that runs after a failed Run or
// Restore, on a context detached from the caller's (which may be the reason
// for the failure).
const cleanupTimeout = 15 * time.Second

// nullNetNS is the file runsc bind-mounts its gofers' empty network
// namespace onto, relative to --root (runsc specutils.NullNetNSFilename).
const nullNetNS = "null-netns"

// Config configures a Runtime.
type Config struct {
	// RunscPath is the runsc binary; empty means DefaultRunscPath().
	RunscPath string
	// RootDir holds runsc's container state (--root); created if missing.
	// Required.
	RootDir string
	// Logger receives debug records of every runsc command and its
	// duration; nil discards.
	Logger *slog.Logger
	// ExtraFlags are global runsc flags appended after ours (e.g.
	// "--debug-log=/dir/", "--debug").
	ExtraFlags []string
	// CheckpointFlags and RestoreFlags are appended to those subcommands
	// after Images' flags (e.g. "--direct"), which makes them run as
	// commands; for measuring options Images does not cover.
	CheckpointFlags, RestoreFlags []string
	// Images says how checkpoint images are written and read; the zero
	// value is what a node uses (see ImageOptions).
	Images ImageOptions
	// ForceCLI runs every operation as a runsc command. By default
	// operations on an existing container go through runsc's own library
	// in this process (library.go), when the binary is the version that
	// library matches.
	ForceCLI bool
}

// Runtime is the gvisor sandbox class. It is safe for concurrent use on
// different slots; calls for one slot must be serialised by the caller (as
// sandbox.Runtime requires), but for a Prepare beside a frozen container's
// Checkpoint (sandbox.Preparer). It keeps no state of its own: runsc's
// state under RootDir is the truth.
type Runtime struct {
	runsc      string
	rootDir    string
	log        *slog.Logger
	extraFlags []string

	checkpointFlags, restoreFlags []string
	img                           ImageOptions
	// lib runs operations on existing containers in process; nil runs
	// runsc commands instead.
	lib *library

	// closing is held for reading by the calls that create containers
	// (Run, Prepare, Restore) and for writing by Close, which sets
	// closed: Close waits for those under way and later ones fail with
	// ErrClosed, since `runsc create` makes RootDir again after Close
	// removed it (a start that raced a node's exit left an empty root).
	closing sync.RWMutex
	closed  bool
}

// ErrClosed: Run, Prepare or Restore after Close.
var ErrClosed = errors.New("gvisor: runtime closed")

// creating admits a call that creates a container until Close; done
// ends it.
func (r *Runtime) creating() (done func(), err error) {
	r.closing.RLock()
	if r.closed {
		r.closing.RUnlock()
		return nil, ErrClosed
	}
	return r.closing.RUnlock, nil
}

var (
	_ sandbox.Runtime  = (*Runtime)(nil)
	_ sandbox.Preparer = (*Runtime)(nil)
	_ sandbox.Freezer  = (*Runtime)(nil)
)

// DefaultRunscPath returns where hack/install-runsc.sh installs runsc:
// ${ATE_CACHE:-$HOME/.cache/ate}/bin/runsc. If neither ATE_CACHE nor HOME
// is set it falls back to os.UserCacheDir's answer.
func DefaultRunscPath() string {
	cache := os.Getenv("ATE_CACHE")
	if cache == "" {
		if home := os.Getenv("HOME"); home != "" {
			cache = filepath.Join(home, ".cache", "ate")
		} else if dir, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(dir, "ate")
		} else {
			cache = filepath.Join(os.TempDir(), "ate-cache")
		}
	}
	return filepath.Join(cache, "bin", "runsc")
}

// New returns a Runtime for cfg. It fails if RootDir is empty or cannot be
// created, or if the runsc binary does not exist (the error says how to
// install it).
func New(cfg Config) (*Runtime, error) {
	if cfg.RootDir == "" {
		return nil, errors.New("gvisor: Config.RootDir is required")
	}
	path := cfg.RunscPath
	if path == "" {
		path = DefaultRunscPath()
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("gvisor: runsc binary: %w (install it with `bash hack/install-runsc.sh`)", err)
	}
	root, err := filepath.Abs(cfg.RootDir)
	if err != nil {
		return nil, fmt.Errorf("gvisor: root dir: %w", err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("gvisor: root dir: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{
		runsc:      path,
		rootDir:    root,
		log:        log,
		extraFlags: cfg.ExtraFlags,

		checkpointFlags: cfg.CheckpointFlags,
		restoreFlags:    cfg.RestoreFlags,
		img:             cfg.Images,
	}
	if !cfg.ForceCLI && libraryUsable(path) {
		if r.lib, err = newLibrary(r.globalArgs(), r.img, r.log); err != nil {
			return nil, fmt.Errorf("gvisor: %w", err)
		}
	}
	return r, nil
}

// Run boots spec in slot with `runsc run --detach` and returns once the
// container process has started. It re-applies the slot's interior address
// first (netns.Reset). On failure the container is force-deleted, so the
// slot is empty again.
//
// A Prepared spec is only started (`runsc start`, through the library
// when it is in use): the sandbox already runs.
func (r *Runtime) Run(ctx context.Context, slot sandbox.Slot, spec sandbox.Spec) error {
	done, err := r.creating()
	if err != nil {
		return err
	}
	defer done()
	switch {
	case !spec.Prepared:
		if err := r.prepare(ctx, slot, spec); err != nil {
			return fmt.Errorf("gvisor: run %s: %w", spec.ID, err)
		}
		err = r.runDetached(ctx, spec, "run", "--detach", "--bundle", spec.BundleDir, spec.ID)
	case r.lib != nil:
		err = r.lib.start(ctx, spec.ID)
	default:
		err = r.runDetached(ctx, spec, "start", spec.ID)
	}
	if err != nil {
		r.discard(ctx, spec)
		return fmt.Errorf("gvisor: run %s in %s: %w", spec.ID, slot.Name, err)
	}
	return nil
}

// Prepare creates spec's container in slot with `runsc create`, so a later
// Run or Restore of the same spec with Prepared set skips the sandbox's
// start-up. It re-applies the slot's interior address first, as Run does.
// On failure the container is force-deleted. A prepared sandbox (sentry
// and gofer, no application) costs memory on every free worker
// (BENCHMARKS.md, Activation latency: standbys).
//
// Beside a container that still exists in slot (one frozen for its
// checkpoint), re-applying the address gives it to the host's side of the
// slot's namespace again, which then answers that container's packets
// (refused connections) until a restore or start into spec takes it: the
// old container has lost its network for good, even if spec is destroyed
// instead (seen on runsc of RunscVersion). Its checkpoint restores into
// spec as any other (TestPrepareBesideCheckpoint).
func (r *Runtime) Prepare(ctx context.Context, slot sandbox.Slot, spec sandbox.Spec) error {
	done, err := r.creating()
	if err != nil {
		return err
	}
	defer done()
	if err := r.prepare(ctx, slot, spec); err != nil {
		return fmt.Errorf("gvisor: prepare %s: %w", spec.ID, err)
	}
	if err := r.runDetached(ctx, spec, "create", "--bundle", spec.BundleDir, spec.ID); err != nil {
		r.discard(ctx, spec)
		return fmt.Errorf("gvisor: prepare %s in %s: %w", spec.ID, slot.Name, err)
	}
	return nil
}

// Freeze pauses container id (`runsc pause`): its processes stop where
// they are, and a later Checkpoint saves them so (sandbox.Freezer).
func (r *Runtime) Freeze(ctx context.Context, slot sandbox.Slot, id string) error {
	var err error
	if r.lib != nil {
		err = r.lib.pause(ctx, id)
	} else {
		_, err = r.command(ctx, runscPause, id)
	}
	if err != nil {
		return fmt.Errorf("gvisor: freeze %s in %s: %w", id, slot.Name, err)
	}
	return nil
}

// Checkpoint saves container id into imageDir with `runsc checkpoint`
// (memory, and the root overlay since it lives in sandbox memory), after
// which the container exits; it then deletes the container so the slot is
// empty. If the checkpoint fails the container may still exist (through
// the library, one whose ctx ended has had its sandbox killed); the error
// carries runsc's message and the caller decides whether to Destroy it.
func (r *Runtime) Checkpoint(ctx context.Context, slot sandbox.Slot, id string, imageDir string) error {
	var err error
	if r.lib != nil && len(r.checkpointFlags) == 0 {
		err = r.lib.checkpoint(ctx, id, imageDir)
	} else {
		args := append([]string{"checkpoint", "--image-path=" + imageDir}, r.img.checkpointFlags()...)
		args = append(args, r.checkpointFlags...)
		_, err = r.command(ctx, append(args, id)...)
	}
	if err != nil {
		return fmt.Errorf("gvisor: checkpoint %s in %s: %w", id, slot.Name, err)
	}
	// The image is complete once checkpoint returns; the sandbox is then
	// stopping on its own, and a forced delete makes sure it is gone.
	if err := r.delete(ctx, id); err != nil {
		return fmt.Errorf("gvisor: delete %s after checkpoint: %w", id, err)
	}
	return nil
}

// CheckpointLive implements sandbox.LiveCheckpointer with `runsc
// checkpoint --leave-running`: the sandbox is frozen while its state is
// written, then carries on.
func (r *Runtime) CheckpointLive(ctx context.Context, slot sandbox.Slot, id string, imageDir string) error {
	var err error
	if r.lib != nil && len(r.checkpointFlags) == 0 {
		err = r.lib.checkpointLive(ctx, id, imageDir)
	} else {
		args := append([]string{"checkpoint", "--leave-running", "--image-path=" + imageDir}, r.img.checkpointFlags()...)
		args = append(args, r.checkpointFlags...)
		_, err = r.command(ctx, append(args, id)...)
	}
	if err != nil {
		return fmt.Errorf("gvisor: checkpoint (leaving it running) %s in %s: %w", id, slot.Name, err)
	}
	return nil
}

var _ sandbox.LiveCheckpointer = (*Runtime)(nil)

// delete force-deletes container id (`runsc delete --force`): its
// processes are killed and its state removed. An unknown id is not an
// error.
func (r *Runtime) delete(ctx context.Context, id string) error {
	if r.lib != nil {
		return r.lib.destroy(ctx, id)
	}
	_, err := r.command(ctx, "delete", "--force", id)
	return err
}

// Restore starts spec in slot from the checkpoint in imageDir with `runsc
// restore --detach` and returns once the restored process runs. It
// re-applies the slot's interior address first. Any failure of the restore
// itself (bad image, runsc error, ctx ended) returns an error wrapping
// sandbox.ErrRestoreFailed, after force-deleting whatever was half
// restored, so the slot is empty and usable. Errors preparing the slot or
// bundle do not wrap ErrRestoreFailed; nothing was started then.
//
// A Prepared spec is restored into the container `runsc create` made; runsc
// then skips starting the sandbox, gofer and network, which is about half
// of a restore (BENCHMARKS.md, BenchmarkRestore/prepared).
func (r *Runtime) Restore(ctx context.Context, slot sandbox.Slot, spec sandbox.Spec, imageDir string) error {
	done, err := r.creating()
	if err != nil {
		return err
	}
	defer done()
	if !spec.Prepared {
		if err := r.prepare(ctx, slot, spec); err != nil {
			return fmt.Errorf("gvisor: restore %s: %w", spec.ID, err)
		}
	}
	if spec.Prepared && r.lib != nil && len(r.restoreFlags) == 0 {
		err = r.lib.restore(ctx, spec.ID, imageDir)
	} else {
		args := append([]string{"restore", "--image-path=" + imageDir}, r.img.restoreFlags()...)
		args = append(args, r.restoreFlags...)
		err = r.runDetached(ctx, spec, append(args, "--bundle", spec.BundleDir, "--detach", spec.ID)...)
	}
	if err != nil {
		r.discard(ctx, spec)
		return fmt.Errorf("gvisor: restore %s in %s: %w: %w", spec.ID, slot.Name, sandbox.ErrRestoreFailed, err)
	}
	return nil
}

// Destroy stops and removes container id: a forced delete, which kills
// its processes (runsc's Container.Destroy, which `runsc delete --force`
// also calls). It returns nil for an unknown id.
func (r *Runtime) Destroy(ctx context.Context, slot sandbox.Slot, id string) error {
	if err := r.delete(ctx, id); err != nil {
		return fmt.Errorf("gvisor: destroy %s in %s: %w", id, slot.Name, err)
	}
	return nil
}

// DestroyAll force-deletes every container under RootDir: what a
// previous process left running when it died without cleaning up. It
// first kills every process still running with RootDir (a runsc command
// the dead process started, a create or restore, runs on without it and
// would make a container after the list below), so call it only while
// nothing else uses RootDir (the node's start-up, under its prefix lock).
// Then it removes what else is left under RootDir but the pinned
// network namespace.
func (r *Runtime) DestroyAll(ctx context.Context) error {
	if err := killRootProcesses(ctx, r.rootDir); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	out, err := r.command(ctx, "list", "-quiet")
	if err != nil {
		return fmt.Errorf("gvisor: list containers: %w", err)
	}
	for _, id := range strings.Fields(string(out)) {
		if err := r.Destroy(ctx, sandbox.Slot{Name: "?"}, id); err != nil {
			return err
		}
	}
	// A `runsc create` killed before it wrote its container's state (its
	// node was SIGKILLed mid-way) leaves the sandbox's lock and control
	// socket, which no list names, and which kept the root from being
	// removed at the next clean exit. Every process under the root is
	// gone and every listed container destroyed, so nothing uses what
	// remains but the pinned network namespace (Close).
	entries, err := os.ReadDir(r.rootDir)
	if err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	for _, e := range entries {
		if e.Name() == nullNetNS {
			continue
		}
		if err := os.RemoveAll(filepath.Join(r.rootDir, e.Name())); err != nil {
			return fmt.Errorf("gvisor: remove what a killed runsc left: %w", err)
		}
	}
	return nil
}

// killRootProcesses SIGKILLs every process whose command line names runsc
// root (--root=ROOT or --root ROOT: runsc commands, sandboxes, gofers)
// and waits until each is gone or a zombie (they are not our children:
// their reaper collects them).
func killRootProcesses(ctx context.Context, root string) error {
	return killProcesses(ctx, root, func([]string) bool { return true })
}

// killBundleProcesses is killRootProcesses for the processes of one
// bundle only (runsc's sandbox and gofer name it with --bundle): what a
// runsc command killed half way through a restore started before it
// wrote the container's state, so no delete can find them.
func killBundleProcesses(ctx context.Context, root, bundle string) error {
	return killProcesses(ctx, root, func(args []string) bool { return hasFlag(args, "--bundle", bundle) })
}

// hasFlag reports whether args hold flag with value, as "flag=value" or
// as "flag" "value".
func hasFlag(args []string, flag, value string) bool {
	for i, a := range args {
		if a == flag+"="+value || (a == flag && i+1 < len(args) && args[i+1] == value) {
			return true
		}
	}
	return false
}

// killProcesses SIGKILLs every process whose command line names runsc
// root and satisfies match, and waits until each is gone or a zombie.
func killProcesses(ctx context.Context, root string, match func(args []string) bool) error {
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return err
	}
	var pids []int
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(string(b), "\x00")
		if !hasFlag(args, "--root", root) || !match(args) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	for _, pid := range pids {
		for {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			if err != nil || strings.Contains(string(b), ") Z ") {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("process %d of %s did not end after SIGKILL: %w", pid, root, context.Cause(ctx))
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}

// Wait blocks until container id exits or ctx ends. An unknown id
// returns at once with an error.
//
// It watches the sandbox process through a pidfd instead of running
// `runsc wait`, which would keep a runsc process alive per running actor
// (BENCHMARKS.md, Density: it cost a sizeable share of each actor's
// memory).
func (r *Runtime) Wait(ctx context.Context, slot sandbox.Slot, id string) error {
	pid, err := r.sandboxPID(ctx, id)
	if err != nil {
		return fmt.Errorf("gvisor: wait %s in %s: %w", id, slot.Name, err)
	}
	if pid <= 0 {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // already gone
	}
	if err != nil {
		return fmt.Errorf("gvisor: wait %s: pidfd: %w", id, err)
	}
	defer unix.Close(fd)
	for ctx.Err() == nil {
		// A pidfd becomes readable when the process exits; the timeout
		// only bounds how late a cancelled ctx is noticed.
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 500)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("gvisor: wait %s: poll: %w", id, err)
		}
		if n > 0 {
			return nil
		}
	}
	return ctx.Err()
}

// DialContext connects to port on the sandbox's interior address from the
// slot's outer namespace. The caller owns the returned conn.
func (r *Runtime) DialContext(ctx context.Context, slot sandbox.Slot, port int) (net.Conn, error) {
	addr := net.JoinHostPort(sandbox.InteriorAddr, strconv.Itoa(port))
	c, err := netns.DialContext(ctx, slot.DialNetNSPath, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gvisor: dial %s in %s: %w", addr, slot.Name, err)
	}
	return c, nil
}

// sandboxPID returns the sandbox process of container id, 0 once it has
// stopped, from the library or else `runsc state`.
func (r *Runtime) sandboxPID(ctx context.Context, id string) (int, error) {
	if r.lib != nil {
		return r.lib.sandboxPID(ctx, id)
	}
	out, err := r.command(ctx, "state", id)
	if err != nil {
		return 0, err
	}
	var st struct {
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, fmt.Errorf("state: %w", err)
	}
	if st.Status == "stopped" {
		return 0, nil
	}
	return st.Pid, nil
}

// Close releases what runsc leaves mounted under RootDir once its
// containers are gone: runsc pins one empty network namespace for its
// gofers as a bind mount at RootDir/null-netns and never unmounts it, so
// RootDir cannot be removed (EBUSY) until Close runs. Call it after every
// container is destroyed. It waits for Run, Prepare and Restore calls
// under way, makes later ones fail (ErrClosed), and removes RootDir if
// nothing else is left in it. It is idempotent.
func (r *Runtime) Close() error {
	r.closing.Lock()
	r.closed = true
	r.closing.Unlock()
	p := filepath.Join(r.rootDir, nullNetNS)
	// Concurrent runsc invocations may stack several mounts there.
	for {
		err := unix.Unmount(p, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break
		}
		if err != nil {
			return fmt.Errorf("gvisor: unmount %s: %w", p, err)
		}
	}
	// Best effort: a container's state left behind keeps the directory;
	// say what, since a container that outlived its node is a bug.
	_ = os.Remove(p)
	if err := os.Remove(r.rootDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		left, _ := os.ReadDir(r.rootDir)
		names := make([]string, 0, len(left))
		for _, e := range left {
			names = append(names, e.Name())
		}
		r.log.Warn("runsc root not empty after its containers were destroyed", "root", r.rootDir, "left", names, "err", err)
	}
	return nil
}

// prepare validates spec, resets the slot's network (runsc took the
// address off at the previous start) and writes the bundle.
func (r *Runtime) prepare(ctx context.Context, slot sandbox.Slot, spec sandbox.Spec) error {
	if err := validateSpec(slot, spec); err != nil {
		return err
	}
	if err := netns.Reset(ctx, slot); err != nil {
		return err
	}
	return writeBundle(slot, spec)
}

// discard removes what a failed Run, prepare or Restore of spec left. It
// kills the processes under the root that name spec's bundle (one per
// container id) first: a runsc command killed after starting the
// sandbox and gofer but before writing the container's state leaves
// them running with no container a delete could name, holding the
// worker's network namespace and memory (seen in e2e TestRestoreKilled);
// then a forced delete removes whatever state was written. It runs even
// when ctx has ended; its own failures are only logged, because the
// caller is already returning the error that matters.
func (r *Runtime) discard(ctx context.Context, spec sandbox.Spec) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if spec.BundleDir != "" {
		if err := killBundleProcesses(ctx, r.rootDir, spec.BundleDir); err != nil {
			r.log.WarnContext(ctx, "kill a failed container's processes", "id", spec.ID, "err", err)
		}
	}
	if err := r.delete(ctx, spec.ID); err != nil {
		r.log.WarnContext(ctx, "force-delete after failure", "id", spec.ID, "err", err)
	}
	// A container whose state was never written is unknown to the
	// delete, which then leaves its sandbox's lock and control socket in
	// the root; its processes are gone, so nothing uses them.
	removeContainerFiles(r.rootDir, spec.ID)
}

// removeContainerFiles removes what runsc keeps under root for
// container id outside its state — the sandbox's lock
// ("<id>_sandbox:<id>.lock", and its state file of the same stem) and
// control socket ("runsc-<id>.sock") — and nothing of any other
// container.
func removeContainerFiles(root, id string) {
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if n := e.Name(); n == "runsc-"+id+".sock" || strings.HasPrefix(n, id+"_sandbox:") {
			_ = os.Remove(filepath.Join(root, n))
		}
	}
}
