// Package sandbox defines the interface every sandbox class
// (internal/sandbox/gvisor, internal/sandbox/fake; their names are
// nodeapi.Class) implements for the node agent. A Runtime drives
// sandboxes in worker slots; one slot hosts at most one container at a
// time.
package sandbox

import (
	"context"
	"errors"
	"net"
)

// InteriorAddr is the IPv4 address every sandbox sees on its only interface
// (169.254.17.2/30, gateway .1), identical on every worker so that a
// checkpoint taken on one worker restores on any other: a restored
// sandbox keeps the address it was checkpointed with.
const InteriorAddr = "169.254.17.2"

// Slot identifies the worker a container runs in.
type Slot struct {
	// Name is the worker's name, unique on the node (e.g. "w0").
	Name string
	// NetNSPath is the inner network namespace the sandbox joins
	// (e.g. /run/netns/ate-w0); empty for classes that need none.
	NetNSPath string
	// DialNetNSPath is the namespace from which InteriorAddr is reachable
	// (the outer per-worker namespace); empty for classes that need none.
	DialNetNSPath string
}

// Spec is one container to boot or restore in a slot.
type Spec struct {
	// ID is the container ID, unique per boot or restore (runsc refuses a
	// reused ID while the old one exists).
	ID string
	// RootFS is the absolute path of the unpacked image root filesystem. It
	// is shared read-only between containers; writes go to the sandbox's
	// in-memory overlay and are part of its checkpoint.
	RootFS string
	// Args is argv[0..]; Env is KEY=VALUE; Cwd defaults to "/".
	Args []string
	Env  []string
	Cwd  string
	// LogPath is a regular file that receives the container's stdout and
	// stderr (appended). It must be a file at both checkpoint and restore:
	// a pipe at one and a file at the other breaks the restore.
	LogPath string
	// BundleDir is a directory the runtime may use for the OCI bundle of
	// this container; the caller removes it after Destroy.
	BundleDir string
	// Mounts are host directories bind-mounted into the container (durable
	// volumes, the identity directory). Their contents live on the host,
	// not in the checkpoint; a restore must be given mounts with the same
	// destinations.
	Mounts []Mount
	// Prepared says the container was created ahead of time by
	// Preparer.Prepare with this ID and an equal spec: Run then only
	// starts it and Restore loads the checkpoint into it, skipping the
	// sandbox's own start-up (runsc create; about half of a restore,
	// BENCHMARKS.md: Restore/default against Restore/prepared).
	Prepared bool
}

// Mount bind-mounts the host directory Source at Destination.
type Mount struct {
	Source, Destination string
	ReadOnly            bool
}

// Runtime is a sandbox class. Implementations are safe for concurrent use
// on different slots; calls for one slot are serialised by the caller.
type Runtime interface {
	// Run boots spec in slot and returns once the container process has
	// started (not when it is ready to serve).
	Run(ctx context.Context, slot Slot, spec Spec) error
	// Checkpoint writes the container's full state (memory and root
	// filesystem overlay) into imageDir, which exists and is empty, and
	// stops the container. After it returns the slot is empty.
	Checkpoint(ctx context.Context, slot Slot, id string, imageDir string) error
	// Restore starts spec from the checkpoint in imageDir and returns once
	// the restored process runs.
	Restore(ctx context.Context, slot Slot, spec Spec, imageDir string) error
	// Destroy stops and removes container id if it exists. It is
	// idempotent and returns nil for an unknown id.
	Destroy(ctx context.Context, slot Slot, id string) error
	// DialContext opens a TCP connection to port on the container's
	// interior address.
	DialContext(ctx context.Context, slot Slot, port int) (net.Conn, error)
	// Wait blocks until container id exits (for whatever reason: its
	// process ended, it was checkpointed or destroyed) or ctx ends. The
	// node uses it to notice sandboxes that die on their own.
	Wait(ctx context.Context, slot Slot, id string) error
}

// LiveCheckpointer is implemented by sandbox classes that can checkpoint a
// container without stopping it: CheckpointLive writes what Checkpoint
// writes into imageDir (which exists and is empty) and leaves the
// container running, as it was, in slot. Tags and forks of a running
// actor use it (docs/actors.md, Tags and fork).
type LiveCheckpointer interface {
	CheckpointLive(ctx context.Context, slot Slot, id string, imageDir string) error
}

// Preparer is implemented by sandbox classes that can create a container
// ahead of its start (a standby): the sandbox, its file server and network
// come up, but no process runs until Run or Restore is called with the same
// spec and Prepared set. Destroy removes a prepared container too. Its
// stdout and stderr are fixed at Prepare (spec.LogPath), so a restore into
// it writes there, not to the restored container's earlier log.
//
// Prepare is the one call that may run on a slot beside another: while
// the container the slot runs is checkpointed, once Freezer.Freeze has
// stopped it. The prepared container takes the slot's network over from
// the frozen one, which can then serve no more; so a caller prepares
// beside a container only once it is frozen for its checkpoint, never
// beside one that goes on running.
type Preparer interface {
	Prepare(ctx context.Context, slot Slot, spec Spec) error
}

// Freezer is implemented by sandbox classes that can stop every process
// of a container in place (`runsc pause`); the container's Checkpoint then
// saves it as it stood, and a restore of that checkpoint runs it again.
// A node freezes a container before a standby prepared beside its
// checkpoint takes the slot's network (Preparer), so the container's
// code never runs without its network. A frozen container that is not
// checkpointed is destroyed.
type Freezer interface {
	Freeze(ctx context.Context, slot Slot, id string) error
}

// ErrRestoreFailed marks a Restore that failed because of the checkpoint
// image or the restore itself; the slot is empty again afterwards.
var ErrRestoreFailed = errors.New("restore failed")

// Execer is implemented by sandbox classes that can run further processes
// in a running container (`ate exec`).
type Execer interface {
	// Exec runs p in container id of slot and returns its exit code once
	// it ended and its output was delivered: 128+n when signal n killed
	// it. If p could not be started (no such program, say) the error
	// wraps ErrExecStart. When ctx ends first, the process is killed and
	// ctx's error returned.
	Exec(ctx context.Context, slot Slot, id string, p Process) (exitCode int, err error)
}
