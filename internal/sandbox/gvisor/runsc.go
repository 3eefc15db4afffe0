package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"substrate.dev/ate/internal/sandbox"
)

// runscPause is runsc's subcommand that freezes a container (Freeze); not
// the checkpoint action of that name.
const runscPause = "pause"

// maxErrOutput bounds how much of runsc's output goes into an error, in
// bytes: enough for its one-line fatal message and a little context.
const maxErrOutput = 4096

// globalArgs returns the flags every runsc invocation gets (see the
// package doc for why each).
func (r *Runtime) globalArgs() []string {
	args := []string{"--root", r.rootDir, "--network=sandbox", "--overlay2=root:memory"}
	return append(args, r.extraFlags...)
}

// command runs a runsc subcommand that starts no long-lived process and
// returns its stdout; a failure's error carries runsc's trimmed stderr.
func (r *Runtime) command(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, r.runsc, append(r.globalArgs(), args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r.log.DebugContext(ctx, "runsc", "cmd", args[0], "args", args[1:], "duration", time.Since(start), "err", err)
	if err != nil {
		return nil, runscError(ctx, args[0], err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// runDetached runs `runsc run|restore --detach` with spec.LogPath as its
// stdout and stderr. runsc hands its own stdio to the container, so the
// log must be a regular file, not a pipe: a pipe would keep this call
// waiting for the sandbox to exit, and a pipe at checkpoint with a file at
// restore breaks the restore. For the same reason runsc's
// own error message lands in that file; it is read back from the offset
// where this call started so the returned error carries it.
func (r *Runtime) runDetached(ctx context.Context, spec sandbox.Spec, args ...string) error {
	logFile, err := os.OpenFile(spec.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer logFile.Close() // runsc's children hold their own copies
	fi, err := logFile.Stat()
	if err != nil {
		return fmt.Errorf("stat log: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("log %s is not a regular file", spec.LogPath)
	}
	offset := fi.Size()

	cmd := exec.CommandContext(ctx, r.runsc, append(r.globalArgs(), args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile // *os.File: passed as-is, no copying goroutine
	start := time.Now()
	err = cmd.Run()
	r.log.DebugContext(ctx, "runsc", "cmd", args[0], "id", spec.ID, "duration", time.Since(start), "err", err)
	if err != nil {
		return runscError(ctx, args[0], err, readFrom(spec.LogPath, offset))
	}
	return nil
}

// readFrom returns up to maxErrOutput bytes of path from offset; errors
// give nil, since this only decorates another error.
func readFrom(path string, offset int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, offset, maxErrOutput))
	return b
}

// runscError wraps a failed runsc command's error with its trimmed output,
// and with ctx's error if the context ending is why runsc was killed.
func runscError(ctx context.Context, sub string, err error, output []byte) error {
	msg := strings.TrimSpace(string(output))
	if len(msg) > maxErrOutput {
		msg = msg[len(msg)-maxErrOutput:]
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		err = fmt.Errorf("%w (%w)", ctxErr, err)
	}
	if msg == "" {
		return fmt.Errorf("runsc %s: %w", sub, err)
	}
	return fmt.Errorf("runsc %s: %w: %s", sub, err, msg)
}
