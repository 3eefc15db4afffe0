package gvisor

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"substrate.dev/ate/internal/sandbox"
)

// TestSpecHardening: the OCI spec the node writes drops capabilities to
// Docker's default set without CAP_NET_RAW, sets no_new_privileges, and
// keeps the root writable only through runsc's overlay (Root.Readonly
// would turn the overlay off, docs/security.md).
func TestSpecHardening(t *testing.T) {
	s := buildSpec(sandbox.Slot{NetNSPath: "/run/netns/x"}, sandbox.Spec{ID: "c", RootFS: "/r", Args: []string{"/a"}})
	if !s.Process.NoNewPrivileges {
		t.Error("NoNewPrivileges is false")
	}
	if s.Root.Readonly {
		t.Error("Root.Readonly is true: runsc would run without its root overlay")
	}
	for _, set := range [][]string{s.Process.Capabilities.Bounding, s.Process.Capabilities.Effective,
		s.Process.Capabilities.Permitted, s.Process.Capabilities.Inheritable} {
		if !slices.Equal(set, defaultCaps) {
			t.Errorf("capability set %v, want %v", set, defaultCaps)
		}
		for _, c := range []string{"CAP_NET_RAW", "CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_SYS_MODULE", "CAP_DAC_READ_SEARCH"} {
			if slices.Contains(set, c) {
				t.Errorf("capability set holds %s", c)
			}
		}
	}
	if s.Process.User.UID != 0 {
		t.Errorf("uid %d; the node runs the image's process as root of the sandbox's kernel", s.Process.User.UID)
	}
}

// TestSandboxPrivileges checks from inside a real sandbox that the
// process has exactly the spec's capabilities (CapBnd/CapEff in
// /proc/self/status of runsc's kernel), and that writes to the image's
// root land in the overlay, not in RootFS on the host.
func TestSandboxPrivileges(t *testing.T) {
	r := newRuntime(t)
	w := newSlot(t)
	spec := newSpec(t, r)
	runReady(t, r, w, spec)
	status := mustGet(t, r, w, "/cat?p=/proc/self/status")
	var want uint64
	for _, c := range defaultCaps {
		want |= 1 << capNumber(t, c)
	}
	for _, field := range []string{"CapBnd", "CapEff", "CapPrm"} {
		got, ok := statusHex(status, field)
		if !ok {
			t.Fatalf("/proc/self/status has no %s:\n%s", field, status)
		}
		if got != want {
			t.Errorf("%s = %#x, want %#x (defaultCaps)", field, got, want)
		}
	}
	if v, ok := statusField(status, "NoNewPrivs"); !ok || v != "1" {
		t.Errorf("NoNewPrivs = %q (present %v), want 1", v, ok)
	}

	mustGet(t, r, w, "/put?p=/overlay-only&v=x")
	if got := mustGet(t, r, w, "/cat?p=/overlay-only"); got != "x" {
		t.Fatalf("write to the root inside = %q", got)
	}
	if _, err := os.Stat(filepath.Join(spec.RootFS, "overlay-only")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a write inside the sandbox reached RootFS on the host (stat: %v)", err)
	}
}

// capNumber is the number of capability name ("CAP_CHOWN").
func capNumber(t *testing.T, name string) uint {
	n, ok := map[string]uint{
		"CAP_AUDIT_WRITE": unix.CAP_AUDIT_WRITE, "CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE,
		"CAP_FOWNER": unix.CAP_FOWNER, "CAP_FSETID": unix.CAP_FSETID, "CAP_KILL": unix.CAP_KILL, "CAP_MKNOD": unix.CAP_MKNOD,
		"CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "CAP_SETFCAP": unix.CAP_SETFCAP, "CAP_SETGID": unix.CAP_SETGID,
		"CAP_SETPCAP": unix.CAP_SETPCAP, "CAP_SETUID": unix.CAP_SETUID, "CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT,
	}[name]
	if !ok {
		t.Fatalf("unknown capability %s", name)
	}
	return n
}

func statusField(status, field string) (string, bool) {
	for _, l := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == field {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

func statusHex(status, field string) (uint64, bool) {
	v, ok := statusField(status, field)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 16, 64)
	return n, err == nil
}
