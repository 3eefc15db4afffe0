package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"substrate.dev/ate/internal/sandbox"
)

// defaultCaps is Docker's default capability set without CAP_NET_RAW (raw
// sockets also need runsc --net-raw). They apply to the sandbox's own
// kernel, not the host, so they are the familiar container set rather than
// runsc spec's bare three.
var defaultCaps = []string{
	"CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER",
	"CAP_FSETID", "CAP_KILL", "CAP_MKNOD", "CAP_NET_BIND_SERVICE",
	"CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT",
}

// defaultPath is the PATH given to a process whose Env sets none (the
// value runsc spec and Docker use).
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// hostname is the same in every sandbox: a restored actor keeps the
// hostname it booted with, so a per-worker one would be wrong after a move.
const hostname = "ate"

// buildSpec returns the OCI runtime spec (the subset runsc reads for our
// containers) for spec in slot. The root is writable inside the sandbox,
// but the image is not: with runsc's root overlay (--overlay2=root:memory)
// every write lands in the sandbox's memory (and in the checkpoint), and
// runsc's gofer serves RootFS read-only and remounts it MS_RDONLY|
// MS_NOSUID|MS_NODEV in its own mount namespace. Root.Readonly must stay
// false: runsc turns the overlay off for a read-only root, which would
// make every write fail.
func buildSpec(slot sandbox.Slot, spec sandbox.Spec) *specs.Spec {
	env := slices.Clone(spec.Env)
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		env = append(env, defaultPath)
	}
	cwd := spec.Cwd
	if cwd == "" {
		cwd = "/"
	}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		// Sandbox-internal tmpfs: lives in sentry memory, so it is
		// checkpointed with the process.
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
	}
	for _, m := range spec.Mounts {
		opts := []string{"rbind", "rw"}
		if m.ReadOnly {
			opts[1] = "ro"
		}
		mounts = append(mounts, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts})
	}
	return &specs.Spec{
		Version: "1.0.0",
		Process: &specs.Process{
			Args: spec.Args,
			Env:  env,
			Cwd:  cwd,
			Capabilities: &specs.LinuxCapabilities{
				Bounding:    defaultCaps,
				Effective:   defaultCaps,
				Inheritable: defaultCaps,
				Permitted:   defaultCaps,
			},
			// setuid and file capabilities grant nothing (PR_SET_NO_NEW_PRIVS
			// in the sandbox's kernel). runsc compares it at restore, so a
			// checkpoint taken without it does not restore with it.
			NoNewPrivileges: true,
			// Soft 1024 keeps select()-era programs safe; hard lets servers
			// that raise their own limit (Go does) have plenty.
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 1024, Hard: 524288}},
		},
		Root:     &specs.Root{Path: spec.RootFS, Readonly: false},
		Hostname: hostname,
		Mounts:   mounts,
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{
			{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace, Path: slot.NetNSPath},
			{Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
		}},
	}
}

// validateSpec checks what runsc would otherwise reject less clearly.
func validateSpec(slot sandbox.Slot, spec sandbox.Spec) error {
	switch {
	case spec.ID == "":
		return fmt.Errorf("spec: empty ID")
	case !filepath.IsAbs(spec.RootFS):
		// runsc resolves a relative root.path against the bundle; we
		// always want the caller's directory.
		return fmt.Errorf("spec %s: RootFS %q is not absolute", spec.ID, spec.RootFS)
	case len(spec.Args) == 0:
		return fmt.Errorf("spec %s: no Args", spec.ID)
	case spec.LogPath == "":
		return fmt.Errorf("spec %s: no LogPath", spec.ID)
	case spec.BundleDir == "":
		return fmt.Errorf("spec %s: no BundleDir", spec.ID)
	case slot.NetNSPath == "":
		return fmt.Errorf("slot %s: no NetNSPath", slot.Name)
	}
	return nil
}

// writeBundle writes config.json for spec into spec.BundleDir, creating
// the directory.
func writeBundle(slot sandbox.Slot, spec sandbox.Spec) error {
	if err := os.MkdirAll(spec.BundleDir, 0o700); err != nil {
		return fmt.Errorf("bundle %s: %w", spec.BundleDir, err)
	}
	b, err := json.MarshalIndent(buildSpec(slot, spec), "", "  ")
	if err != nil {
		return fmt.Errorf("bundle %s: %w", spec.BundleDir, err)
	}
	p := filepath.Join(spec.BundleDir, "config.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return fmt.Errorf("bundle %s: %w", spec.BundleDir, err)
	}
	return nil
}
