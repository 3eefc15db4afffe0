package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ateRun runs the CLI against this installation with stdin and returns
// its stdout, stderr and exit code; it fails the test if the CLI does
// not end within a minute (an exec must never hang).
func (in *installation) ateRun(stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ateBin, args...)
	cmd.Dir = repoDir
	cmd.Env = append(os.Environ(), "ATE_CONFIG="+filepath.Join(in.dataDir, "config.yaml"))
	cmd.Stdin = stdin
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		in.t.Fatalf("ate %s did not end within a minute; stderr %q", strings.Join(args, " "), e.String())
	}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		in.t.Fatalf("ate %s: %v", strings.Join(args, " "), err)
	}
	return o.String(), e.String(), code
}

// startDebugActor starts an installation with one RUNNING python-notes
// actor "dbg-1" whose volume "data" is mounted at /data.
func startDebugActor(t *testing.T) *installation {
	in := startUp(t, 1)
	in.createTemplate("test/e2e/testdata/notes-debug.yaml", "notes-debug")
	in.ate("create", "actor", "dbg-1", "--template", "notes-debug")
	in.ate("resume", "actor", "dbg-1")
	return in
}

// TestExecActor runs commands in a running python-notes actor: stdout
// and stderr arrive apart, the exit code is passed through, stdin is
// piped in, a missing program fails at once with exit 127, an actor not
// RUNNING is refused, and a suspend during an exec ends it.
func TestExecActor(t *testing.T) {
	in := startDebugActor(t)

	out, errOut, code := in.ateRun(nil, "exec", "actor", "dbg-1", "--", "python3", "-c",
		"import sys; print('to-out'); print('to-err', file=sys.stderr)")
	if code != 0 || out != "to-out\n" || errOut != "to-err\n" {
		t.Fatalf("exec print: code %d, stdout %q, stderr %q; want 0, %q, %q", code, out, errOut, "to-out\n", "to-err\n")
	}
	if _, errOut, code := in.ateRun(nil, "exec", "actor", "dbg-1", "--", "python3", "-c", "import sys; sys.exit(3)"); code != 3 {
		t.Fatalf("exec exit(3): code %d (stderr %q), want 3", code, errOut)
	}
	if _, errOut, code := in.ateRun(nil, "exec", "actor", "dbg-1", "--", "sh", "-c", "kill -9 $$"); code != 128+9 {
		t.Fatalf("exec of a process killed by SIGKILL: code %d (stderr %q), want 137", code, errOut)
	}

	input := make([]byte, 3<<20)
	_, _ = rand.Read(input)
	sum := sha256.Sum256(input)
	out, errOut, code = in.ateRun(bytes.NewReader(input), "exec", "actor", "dbg-1", "-i", "--", "python3", "-c",
		"import sys, hashlib; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())")
	if code != 0 || strings.TrimSpace(out) != hex.EncodeToString(sum[:]) {
		t.Fatalf("exec -i: code %d, stdout %q, stderr %q; want the sha256 of the input %x", code, out, errOut, sum)
	}

	// -t: the command runs on a terminal, which carries its stderr too.
	out, errOut, code = in.ateRun(nil, "exec", "actor", "dbg-1", "-t", "--", "python3", "-c",
		"import os, sys; print(os.isatty(0), os.isatty(1)); print('tty-err', file=sys.stderr)")
	if code != 0 || !strings.Contains(out, "True True") || !strings.Contains(out, "tty-err") || errOut != "" {
		t.Fatalf("exec -t: code %d, stdout %q, stderr %q; want a terminal on stdin and stdout, stderr in stdout", code, out, errOut)
	}

	in.execEnvNotOnCommandLines("dbg-1")

	_, errOut, code = in.ateRun(nil, "exec", "actor", "dbg-1", "--", "/no/such/program")
	if code != 127 || !strings.Contains(errOut, "/no/such/program") {
		t.Fatalf("exec of a missing program: code %d, stderr %q; want 127 and a message naming it", code, errOut)
	}

	// A suspend while an exec runs ends the exec with a clear error and
	// completes; the exec'd process is not in the snapshot.
	var execErr bytes.Buffer
	cmd, line := in.ateStarted(&execErr, "exec", "actor", "dbg-1", "--", "python3", "-u", "-c",
		"import time; print('ready'); time.sleep(600)")
	if line != "ready\n" {
		t.Fatalf("long exec: first line %q", line)
	}
	in.ate("suspend", "actor", "dbg-1")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(execErr.String(), "suspended") {
			t.Fatalf("exec across a suspend: %v, stderr %q; want a failure saying the actor is being suspended", err, execErr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("exec still running a minute after its actor was suspended")
	}

	_, errOut, code = in.ateRun(nil, "exec", "actor", "dbg-1", "--", "true")
	if code != 1 || !strings.Contains(errOut, "not RUNNING") {
		t.Fatalf("exec in a SUSPENDED actor: code %d, stderr %q; want 1 and \"not RUNNING\"", code, errOut)
	}
	// The restored actor has no leftover of the killed process.
	in.ate("resume", "actor", "dbg-1")
	out, errOut, code = in.ateRun(nil, "exec", "actor", "dbg-1", "--", "python3", "-c",
		"import os; print(sum(1 for p in os.listdir('/proc') if p.isdigit() and b'sle'+b'ep(600)' in open('/proc/'+p+'/cmdline','rb').read()))")
	if code != 0 || strings.TrimSpace(out) != "0" {
		t.Fatalf("processes still sleeping after restore: %q (code %d, stderr %q), want 0", out, code, errOut)
	}
}

// TestCpActor copies a 10 MB random file into a running actor's volume
// and back, byte-identical (also as the actor sees it, and after a
// suspend and resume), and refuses paths outside the volumes: not under a
// mount path, with "..", or through symlinks leading out.
func TestCpActor(t *testing.T) {
	in := startDebugActor(t)
	dir := t.TempDir()
	data := make([]byte, 10<<20)
	_, _ = rand.Read(data)
	want := sha256.Sum256(data)
	src := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	in.ate("cp", src, "actor/dbg-1:/data/sub/big.bin")
	out, errOut, code := in.ateRun(nil, "exec", "actor", "dbg-1", "--", "python3", "-c",
		"import hashlib; print(hashlib.sha256(open('/data/sub/big.bin','rb').read()).hexdigest())")
	if code != 0 || strings.TrimSpace(out) != hex.EncodeToString(want[:]) {
		t.Fatalf("sha256 inside the actor: %q (code %d, stderr %q), want %x", out, code, errOut, want)
	}
	back := func(name string) {
		t.Helper()
		dst := filepath.Join(dir, name)
		in.ate("cp", "actor/dbg-1:/data/sub/big.bin", dst)
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(got) != want {
			t.Fatalf("%s: %d bytes, sha256 %x; want %d bytes, %x", name, len(got), sha256.Sum256(got), len(data), want)
		}
	}
	back("back.bin")
	in.ate("suspend", "actor", "dbg-1")
	if _, err := in.ateErr("cp", "actor/dbg-1:/data/sub/big.bin", filepath.Join(dir, "x")); err == nil {
		t.Fatal("cp from a SUSPENDED actor succeeded; want it refused")
	}
	in.ate("resume", "actor", "dbg-1")
	back("after-resume.bin")

	// Symlinks made inside the actor that point out of the volume.
	in.ate("exec", "actor", "dbg-1", "--", "python3", "-c",
		"import os; os.symlink('/etc', '/data/abs'); os.symlink('../../../../../../../../etc', '/data/rel')")
	for _, p := range []string{"/etc/passwd", "/data/../etc/passwd", "/data/sub/../../etc/passwd", "/data/abs/passwd",
		"/data/rel/passwd", "data/sub/big.bin", "/data"} {
		out, err := in.ateErr("cp", "actor/dbg-1:"+p, filepath.Join(dir, "escaped"))
		if err == nil || !strings.Contains(out, "not inside one of the actor's volumes") {
			t.Errorf("cp from %s: %v %q; want it refused as outside the volumes", p, err, out)
		}
		out, err = in.ateErr("cp", src, "actor/dbg-1:"+p)
		if err == nil || !strings.Contains(out, "not inside one of the actor's volumes") {
			t.Errorf("cp to %s: %v %q; want it refused as outside the volumes", p, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "escaped")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused copy left a local file: %v", err)
	}
}

// TestExecCpCluster runs exec and cp through a separate API server and
// node (the node protocol's ExecActor, CopyToActor and CopyFromActor):
// exit code, stdin, stderr apart, a 10 MB round trip, a refused escape
// and a missing program keep their meaning across the extra hop.
func TestExecCpCluster(t *testing.T) {
	c := startCluster(t, "n1")
	in := c.in
	in.createTemplate("test/e2e/testdata/notes-debug.yaml", "notes-debug")
	in.ate("create", "actor", "dbg-1", "--template", "notes-debug")
	in.ate("resume", "actor", "dbg-1")

	out, errOut, code := in.ateRun(strings.NewReader("abc"), "exec", "actor", "dbg-1", "-i", "--", "python3", "-c",
		"import sys; d=sys.stdin.read(); print(d.upper()); print('e', file=sys.stderr); sys.exit(5)")
	if code != 5 || out != "ABC\n" || errOut != "e\n" {
		t.Fatalf("exec through the node protocol: code %d, stdout %q, stderr %q; want 5, \"ABC\\n\", \"e\\n\"", code, out, errOut)
	}
	if _, errOut, code := in.ateRun(nil, "exec", "actor", "dbg-1", "--", "/no/such/program"); code != 127 {
		t.Fatalf("exec of a missing program through the node protocol: code %d, stderr %q; want 127", code, errOut)
	}

	dir := t.TempDir()
	data := make([]byte, 10<<20)
	_, _ = rand.Read(data)
	src, dst := filepath.Join(dir, "big.bin"), filepath.Join(dir, "back.bin")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	in.ate("cp", src, "actor/dbg-1:/data/big.bin")
	in.ate("cp", "actor/dbg-1:/data/big.bin", dst)
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("10 MB round trip through the node protocol: %d bytes back, contents differ", len(got))
	}
	if out, err := in.ateErr("cp", "actor/dbg-1:/data/../etc/passwd", dst); err == nil || !strings.Contains(out, "not inside one of the actor's volumes") {
		t.Fatalf("cp of an escaping path through the node protocol: %v %q; want it refused", err, out)
	}
}

// execEnvNotOnCommandLines runs a long exec in actor with a secret in
// `ate exec -e`: the process sees it, and no host process but the CLI
// itself has it on its command line, which every local user may read
// (/proc/PID/cmdline, ps).
func (in *installation) execEnvNotOnCommandLines(actor string) {
	t := in.t
	t.Helper()
	secret := "EXEC-SECRET-" + rand.Text()
	cmd, line := in.ateStarted(nil, "exec", "actor", actor, "-e", "EXEC_SECRET="+secret, "--", "python3", "-u", "-c",
		"import os, time; print(os.environ['EXEC_SECRET']); time.sleep(600)")
	if line != secret+"\n" {
		t.Fatalf("exec -e: first line %q; want the secret", line)
	}
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p == fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid) {
			continue // the CLI's own, on the caller's machine
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the exec's -e value: %q", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
}
