package gvisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKillBundleProcesses: after a failed restore, the processes of that
// bundle under the node's runsc root are killed (whether the flag is
// written --bundle=B or --bundle B), and no other: not another bundle's,
// not the same bundle's under another root.
func TestKillBundleProcesses(t *testing.T) {
	start := func(args ...string) *exec.Cmd {
		t.Helper()
		// sh waits in its read builtin on a pipe nobody writes: one
		// process, whose command line holds the flags, and no child
		// of its own that a kill would leave behind.
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", append([]string{"-c", "read x", "sh"}, args...)...)
		cmd.Stdin = r
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); w.Close() })
		return cmd
	}
	root, bundle := "/run/ate/test-"+t.Name(), "/tmp/bundles/ate-1"
	sandbox := start("--root="+root, "boot", "--bundle="+bundle, "ate-1")
	gofer := start("--root="+root, "gofer", "--bundle", bundle)
	other := start("--root="+root, "boot", "--bundle="+bundle+"-2", "ate-2")
	otherRoot := start("--root="+root+"-x", "boot", "--bundle="+bundle, "ate-1")

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := killBundleProcesses(ctx, root, bundle); err != nil {
		t.Fatal(err)
	}
	for name, cmd := range map[string]*exec.Cmd{"sandbox": sandbox, "gofer": gofer} {
		// Killed: Wait returns (the process is our child, a zombie now).
		if err := cmd.Wait(); err == nil {
			t.Errorf("%s exited cleanly, want killed", name)
		}
	}
	for name, cmd := range map[string]*exec.Cmd{"another bundle": other, "another root": otherRoot} {
		// Alive: neither gone nor a zombie.
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			t.Errorf("%s's process was killed: %q, %v", name, b, err)
		}
	}
}

func TestHasFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"runsc", "--bundle=/b", "boot"}, true},
		{[]string{"runsc", "--bundle", "/b"}, true},
		{[]string{"runsc", "--bundle=/b2"}, false},
		{[]string{"runsc", "--bundle"}, false},
		{[]string{"runsc", "/b"}, false},
	} {
		if got := hasFlag(tc.args, "--bundle", "/b"); got != tc.want {
			t.Errorf("hasFlag(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestRemoveContainerFiles: after a container whose state was never
// written is discarded, its sandbox lock and control socket leave the
// runsc root (seen left by e2e TestRestoreKilled); another container's
// stay.
func TestRemoveContainerFiles(t *testing.T) {
	root := t.TempDir()
	mine := []string{"ate-1_sandbox:ate-1.lock", "ate-1_sandbox:ate-1.state", "runsc-ate-1.sock"}
	others := []string{"ate-10_sandbox:ate-10.lock", "runsc-ate-10.sock", "ate-2_sandbox:ate-2.state"}
	for _, n := range append(mine, others...) {
		if err := os.WriteFile(filepath.Join(root, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removeContainerFiles(root, "ate-1")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	slices.Sort(left)
	want := slices.Sorted(slices.Values(others))
	if !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
}
