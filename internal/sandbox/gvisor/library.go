package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/state/statefile"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"
	runscsandbox "gvisor.dev/gvisor/runsc/sandbox"
)

// library drives runsc's own container package in this process instead of
// running the runsc command, for every operation on a container that
// exists: start and restore of a prepared one (a standby), checkpoint,
// delete, and reading its sandbox's pid. Each is then a few control-socket
// calls to the running sandbox and a state-file update. Creating a
// container (`runsc create`, `runsc run`) still runs the command, since it
// starts the sandbox and gofer processes from the runsc binary.
//
// Why: a good part of a `runsc restore` into a standby was the command
// itself — exec of the large binary, Go start-up, flag and config set-up,
// exit — rather than the sandbox's restore, and `runsc delete` was mostly
// the command too (BENCHMARKS.md, Latest make bench: Restore/prepared
// against Restore/prepared-cli). The library does what the
// commands do (container.Load, then the Container method the command
// calls), so runsc's state under --root stays the single truth and the
// command and the library can take turns on one container.
//
// It is used only when the runsc binary is the version this module
// requires (RunscVersion, against the stamp hack/install-runsc.sh writes),
// since the state file and the control protocol are runsc-internal.
type library struct {
	conf *config.Config
	log  *slog.Logger
	img  ImageOptions
}

// quietLibraryLog points runsc's package-global logger, which writes to
// stderr by default, at nothing: every failure comes back as an error, and
// runsc's own logs of an operation are what ForceCLI plus --debug-log are
// for.
var quietLibraryLog sync.Once

// newLibrary returns a library configured by runsc's global flags args,
// exactly as the runsc command would parse them, that logs each call to
// logger at debug level as the runsc commands are logged.
func newLibrary(args []string, img ImageOptions, logger *slog.Logger) (*library, error) {
	quietLibraryLog.Do(func() { log.SetTarget(discardEmitter{}) })
	flags := flag.NewFlagSet("runsc", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	config.RegisterFlags(flags)
	if err := flags.Parse(args); err != nil {
		return nil, fmt.Errorf("runsc flags %q: %w", args, err)
	}
	conf, err := config.NewFromFlags(flags)
	if err != nil {
		return nil, fmt.Errorf("runsc config: %w", err)
	}
	return &library{conf: conf, log: logger, img: img}, nil
}

// libraryUsable reports whether runsc at path is the build this module's
// gvisor library matches: its stamp file (path + ".version") starts with
// RunscVersion.
func libraryUsable(path string) bool {
	stamp, err := os.ReadFile(path + ".version")
	return err == nil && strings.HasPrefix(string(stamp), RunscVersion+" ")
}

// start starts the application of created container id (`runsc start`).
func (l *library) start(ctx context.Context, id string) error {
	return l.call(ctx, "start", id, container.LoadOpts{}, true, func(c *container.Container) error { return c.Start(l.conf) })
}

// restore restores created container id from imageDir (`runsc restore
// --detach` of an existing container, with --background if the image
// options ask for it). The image is read through the page cache (direct
// false): a snapshot written moments ago is still there.
func (l *library) restore(ctx context.Context, id, imageDir string) error {
	return l.call(ctx, "restore", id, container.LoadOpts{}, true, func(c *container.Container) error {
		return c.Restore(l.conf, imageDir, false, l.img.Background, nil)
	})
}

// checkpoint saves container id into imageDir (`runsc checkpoint`, with
// the image options' compression and zero-page exclusion); the sandbox
// exits afterwards.
func (l *library) checkpoint(ctx context.Context, id, imageDir string) error {
	return l.call(ctx, "checkpoint", id, container.LoadOpts{}, true, func(c *container.Container) error {
		return c.Checkpoint(l.conf, imageDir, l.checkpointOpts(c.ID, false))
	})
}

// pause stops container id's processes in place (`runsc pause`); a
// checkpoint of the paused container saves them as they stood.
func (l *library) pause(ctx context.Context, id string) error {
	return l.call(ctx, runscPause, id, container.LoadOpts{}, false, func(c *container.Container) error { return c.Pause() })
}

// checkpointLive is checkpoint leaving the container running (`runsc
// checkpoint --leave-running`). A ctx that ends mid-way kills the
// sandbox (call's kill), as for checkpoint.
func (l *library) checkpointLive(ctx context.Context, id, imageDir string) error {
	return l.call(ctx, "checkpoint", id, container.LoadOpts{}, true, func(c *container.Container) error {
		return c.Checkpoint(l.conf, imageDir, l.checkpointOpts(c.ID, true))
	})
}

// checkpointOpts are runsc's options for a checkpoint of container id
// under l's image options.
func (l *library) checkpointOpts(id string, resume bool) runscsandbox.CheckpointOpts {
	level := statefile.CompressionLevelNone
	if l.img.Compress {
		level = statefile.CompressionLevelFlateBestSpeed
	}
	return runscsandbox.CheckpointOpts{
		Compression:                level,
		ExcludeCommittedZeroPages:  l.img.ExcludeZeroPages,
		Resume:                     resume,
		SaveRestoreExecContainerID: id,
	}
}

// destroy stops container id's processes and removes its state (`runsc
// delete --force`); an unknown id is not an error.
func (l *library) destroy(ctx context.Context, id string) error {
	err := l.call(ctx, "delete", id, container.LoadOpts{SkipCheck: true}, false, func(c *container.Container) error {
		return c.Destroy()
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// sandboxPID returns the sandbox process of container id, or 0 if the
// container has stopped (`runsc state`'s pid and status, without a runsc
// process competing for the CPU with the actor's first request). It reads
// the state file only (SkipCheck): no control call to a sandbox that is
// busy answering that request; a caller that finds the pid gone treats
// the container as stopped.
func (l *library) sandboxPID(ctx context.Context, id string) (int, error) {
	var pid int
	err := l.call(ctx, "state", id, container.LoadOpts{SkipCheck: true}, false, func(c *container.Container) error {
		if c.Status != container.Stopped {
			pid = c.SandboxPid()
		}
		return nil
	})
	return pid, err
}

// call loads container id with opts and runs op on it, the library's
// stand-in for runsc subcommand cmd, and logs it. runsc's calls
// take no context, so op runs in its own goroutine. If ctx ends first and
// kill is set, the container's sandbox process is killed, which ends op's
// control call (and releases runsc's lock on the container, which op
// holds and the caller's force-delete needs); call then waits up to
// cleanupTimeout in all, for the load and for op to return, and returns
// ctx's error.
func (l *library) call(ctx context.Context, cmd, id string, opts container.LoadOpts, kill bool, op func(*container.Container) error) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	defer func() {
		l.log.DebugContext(ctx, "runsc library", "cmd", cmd, "id", id, "duration", time.Since(start), "err", err)
	}()
	done := make(chan error, 1)
	pid := make(chan int, 1)
	go func() {
		// Not an exact load: for a container that does not exist that
		// would leave a lock file behind in the root dir. The search
		// matches id as a prefix, hence the check that it found id.
		c, err := container.Load(l.conf.RootDir, container.FullID{ContainerID: id}, opts)
		if err == nil && c.ID != id {
			err = fmt.Errorf("found %s: %w", c.ID, fs.ErrNotExist)
		}
		if err != nil {
			pid <- 0
			done <- fmt.Errorf("load container %s: %w", id, err)
			return
		}
		pid <- c.SandboxPid()
		done <- op(c)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	if kill {
		// The load itself may hang (it takes the container's lock and
		// asks the sandbox for its state), so the wait is bounded from
		// here.
		timeout := time.NewTimer(cleanupTimeout)
		defer timeout.Stop()
		select {
		case p := <-pid:
			if p > 0 {
				_ = unix.Kill(p, unix.SIGKILL)
			}
			select {
			case <-done:
			case <-timeout.C:
			}
		case <-timeout.C:
		}
	}
	return ctx.Err()
}

type discardEmitter struct{}

func (discardEmitter) Emit(int, log.Level, time.Time, string, ...any) {}
