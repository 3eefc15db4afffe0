package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/container"

	"substrate.dev/ate/internal/sandbox"
)

var _ sandbox.Execer = (*Runtime)(nil)

// execOutputGrace bounds how long Exec waits, after the process exited,
// for its output to drain: a background child the process left running
// may hold the output open for ever.
const execOutputGrace = 2 * time.Second

// maxHeldOutput bounds the error output held back until the process is
// known to have started (startGate), in bytes: runsc's one-line error
// fits many times over.
const maxHeldOutput = 64 << 10

// Exec runs p in container id with `runsc exec` (always the command, never
// the library: the command hands its own stdio to the process and waits
// for it, which is all an exec needs). The process's pid inside the
// sandbox is written to a file (--internal-pid-file), which tells a
// process that started from one that never did (runsc then exits 128 with
// its error on stderr; that text becomes the error, wrapping
// sandbox.ErrExecStart, instead of reaching p.Stderr), and lets a
// cancelled Exec kill the process inside the sandbox (`runsc kill --pid`),
// not only runsc on the host.
func (r *Runtime) Exec(ctx context.Context, slot sandbox.Slot, id string, p sandbox.Process) (int, error) {
	if len(p.Args) == 0 {
		return 0, fmt.Errorf("gvisor: exec in %s: no command: %w", id, sandbox.ErrExecStart)
	}
	dir, err := os.MkdirTemp("", "ate-exec-")
	if err != nil {
		return 0, fmt.Errorf("gvisor: exec: %w", err)
	}
	defer os.RemoveAll(dir)
	pidFile := filepath.Join(dir, "pid")
	process, err := r.processFile(ctx, id, dir, p)
	if err != nil {
		return 0, fmt.Errorf("gvisor: exec in %s: %w", id, err)
	}
	args := []string{"exec", "--internal-pid-file=" + pidFile, "--process=" + process, id}
	cmd := exec.Command(r.runsc, append(r.globalArgs(), args...)...)
	cmd.WaitDelay = execOutputGrace

	errOut := p.Stderr
	if p.TTY {
		errOut = p.Stdout
	}
	gate := &startGate{pidFile: pidFile, w: orDiscard(errOut)}
	var started func() (wait func(), err error)
	if p.TTY {
		started, err = r.ptyStdio(cmd, p, gate)
	} else {
		started, err = pipeStdio(cmd, p, gate)
	}
	if err != nil {
		return 0, fmt.Errorf("gvisor: exec in %s: %w", id, err)
	}
	begin := time.Now()
	waitIO, err := started()
	if err != nil {
		return 0, fmt.Errorf("gvisor: exec in %s: %w", id, err)
	}

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var waitErr error
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		r.killExec(ctx, id, pidFile)
		_ = cmd.Process.Kill()
		<-done
		waitIO()
		return 0, fmt.Errorf("gvisor: exec in %s ended: %w", id, context.Cause(ctx))
	}
	waitIO()
	r.log.DebugContext(ctx, "runsc", "cmd", "exec", "id", id, "duration", time.Since(begin), "err", waitErr)
	code := 0
	var exitErr *exec.ExitError
	switch {
	case errors.As(waitErr, &exitErr):
		code = exitErr.ExitCode()
	case waitErr != nil && !errors.Is(waitErr, exec.ErrWaitDelay):
		return 0, fmt.Errorf("gvisor: exec in %s: %w", id, waitErr)
	}
	if !gate.start() {
		msg := strings.TrimSpace(gate.held.String())
		if msg == "" {
			msg = "runsc exited " + strconv.Itoa(code)
		}
		return 0, fmt.Errorf("%w: %s", sandbox.ErrExecStart, msg)
	}
	return code, nil
}

// processFile writes, for `runsc exec --process`, the container's own
// process (user, capabilities, environment, working directory) with p's
// command, p's environment after the container's, p's working directory
// if set and a terminal if p asks for one: what `runsc exec --env=K=V
// --cwd=D ID ARGS…` would run, without the environment on runsc's
// command line, where every local user's ps reads it (an `ate exec -e`
// value is often a secret). The file is 0600 in dir, the caller's
// private temporary directory.
func (r *Runtime) processFile(ctx context.Context, id, dir string, p sandbox.Process) (string, error) {
	spec, err := r.containerSpec(ctx, id)
	if err != nil {
		return "", err
	}
	if spec.Process == nil {
		return "", fmt.Errorf("container %s has no process in its spec", id)
	}
	proc := *spec.Process
	proc.Args = p.Args
	proc.Env = append(slices.Clone(proc.Env), p.Env...)
	if p.Cwd != "" {
		proc.Cwd = p.Cwd
	}
	proc.Terminal, proc.ConsoleSize = p.TTY, nil
	b, err := json.Marshal(&proc)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "process.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// containerSpec returns the OCI spec container id runs: the library
// reads it from runsc's state, the command from the bundle `runsc state`
// names.
func (r *Runtime) containerSpec(ctx context.Context, id string) (*specs.Spec, error) {
	if r.lib != nil {
		var spec *specs.Spec
		err := r.lib.call(ctx, "state", id, container.LoadOpts{SkipCheck: true}, false, func(c *container.Container) error {
			spec = c.Spec
			return nil
		})
		if err != nil {
			return nil, err
		}
		if spec == nil {
			return nil, fmt.Errorf("container %s has no spec", id)
		}
		return spec, nil
	}
	out, err := r.command(ctx, "state", id)
	if err != nil {
		return nil, err
	}
	var st specs.State
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("runsc state %s: %w", id, err)
	}
	b, err := os.ReadFile(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("bundle of %s: %w", id, err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("bundle of %s: %w", id, err)
	}
	return &spec, nil
}

// killExec kills the exec'd process inside the sandbox, whose pid runsc
// wrote to pidFile; nothing to do when it never started.
func (r *Runtime) killExec(ctx context.Context, id, pidFile string) {
	b, err := os.ReadFile(pidFile)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := r.command(kctx, "kill", "--pid="+string(bytes.TrimSpace(b)), id, "KILL"); err != nil {
		r.log.WarnContext(ctx, "kill exec'd process", "id", id, "err", err)
	}
}

// pipeStdio connects p to cmd through pipes. Stdin is copied by a
// goroutine of its own that Exec does not wait for: an interactive
// source may never reach EOF, and the process ending closes the pipe.
func pipeStdio(cmd *exec.Cmd, p sandbox.Process, gate *startGate) (func() (func(), error), error) {
	cmd.Stdout, cmd.Stderr = orDiscard(p.Stdout), gate
	var stdin io.WriteCloser
	if p.Stdin != nil {
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	return func() (func(), error) {
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		if stdin != nil {
			go func() {
				_, _ = io.Copy(stdin, p.Stdin)
				_ = stdin.Close()
			}()
		}
		return func() {}, nil
	}, nil
}

// ptyStdio runs cmd on a new pseudo-terminal: runsc sees a terminal on
// its stdio and makes it the process's controlling terminal inside the
// sandbox. The returned wait blocks until the terminal's output is
// delivered, at most execOutputGrace after the process ended.
func (r *Runtime) ptyStdio(cmd *exec.Cmd, p sandbox.Process, gate *startGate) (func() (func(), error), error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open pty: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	// A size already known applies before the process starts, so it
	// never sees a 0x0 terminal.
	select {
	case sz, ok := <-p.Resize:
		if ok {
			_ = pty.Setsize(ptmx, &pty.Winsize{Rows: sz.Rows, Cols: sz.Cols})
		}
	default:
	}
	return func() (func(), error) {
		err := cmd.Start()
		_ = tty.Close() // the child has its own copy
		if err != nil {
			_ = ptmx.Close()
			return nil, err
		}
		if p.Resize != nil {
			go func() {
				for sz := range p.Resize {
					_ = pty.Setsize(ptmx, &pty.Winsize{Rows: sz.Rows, Cols: sz.Cols})
				}
			}()
		}
		if p.Stdin != nil {
			go func() { _, _ = io.Copy(ptmx, p.Stdin) }()
		}
		out := make(chan struct{})
		go func() {
			// Ends with EIO once the last holder of the terminal closed it.
			_, _ = io.Copy(gate, ptmx)
			close(out)
		}()
		return func() {
			select {
			case <-out:
			case <-time.After(execOutputGrace):
			}
			_ = ptmx.Close()
		}, nil
	}, nil
}

// startGate passes writes to w once the exec'd process is known to have
// started (runsc wrote its pid file) and holds them back until then, up
// to maxHeldOutput: before that, what arrives is runsc's own error
// message, which belongs in Exec's error. Safe for concurrent use.
type startGate struct {
	pidFile string
	w       io.Writer

	mu      sync.Mutex
	started bool
	held    bytes.Buffer
}

func (g *startGate) Write(b []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.started && !g.checkLocked() && g.held.Len()+len(b) <= maxHeldOutput {
		return g.held.Write(b)
	}
	return g.w.Write(b)
}

// start reports whether the process started, first delivering what was
// held back if it did.
func (g *startGate) start() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started || g.checkLocked()
}

// checkLocked looks for the pid file and, once it is there, flushes what
// was held. g.mu is held.
func (g *startGate) checkLocked() bool {
	b, err := os.ReadFile(g.pidFile)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return false
	}
	g.started = true
	if g.held.Len() > 0 {
		_, _ = g.w.Write(g.held.Bytes())
		g.held.Reset()
	}
	return true
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
