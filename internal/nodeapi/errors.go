package nodeapi

import (
	"errors"
	"fmt"
)

// The node's errors: a node's calls wrap them, the node protocol sends
// each as a gRPC code and turns it back into the same sentinel
// (internal/nodeagent/errors.go), and the API server maps them to its
// own codes (internal/apiserver/errors.go).

// ErrStale: the worker does not host the actor the caller expects (it was
// suspended, moved or never started there).
var ErrStale = errors.New("worker does not host this actor")

// ErrUnreachable: the node did not answer (the call failed on the way,
// or ran out of time): whatever it was asked to do may or may not have
// happened, and a sandbox there may still run.
var ErrUnreachable = errors.New("node agent unreachable")

// ErrUnknownWorker: no worker of that name on this node.
var ErrUnknownWorker = errors.New("unknown worker")

// ErrNotServing: the node refuses to start a sandbox because it is not
// serving: its lease in the record store may have run out (by its own
// count), so a replica may be declaring it lost and moving its actors.
// Nothing was started: the caller places the actor on another node.
var ErrNotServing = errors.New("node is not serving: its lease in the record store may have run out")

// ErrStartFailed wraps any failure to bring a sandbox to ready (image,
// boot, restore, wakeup probe). The slot is empty again when it is returned.
var ErrStartFailed = errors.New("start failed")

// MaxCopyBytes bounds one file `ate cp` copies into or out of an actor's
// volumes: 1 GiB. Volumes are copied into every snapshot of the actor,
// so a file far larger belongs in object storage, not in a volume.
const MaxCopyBytes int64 = 1 << 30

// ErrBadPath: an `ate cp` path is not a file inside one of the actor's
// durable volumes (not absolute, has a ".." element, lies outside every
// volume's mount path, or leads out of the volume through a symlink).
var ErrBadPath = errors.New("path is not inside one of the actor's volumes")

// ErrTooLarge: a file to copy exceeds MaxCopyBytes.
var ErrTooLarge = fmt.Errorf("file exceeds the %d-byte copy limit", MaxCopyBytes)

// ErrNoFile: the file to copy out does not exist.
var ErrNoFile = errors.New("no such file in the actor's volumes")

// ErrExecStart marks an exec whose process never started (no such
// program, say).
var ErrExecStart = errors.New("could not start the process")

// ErrExecEnded ends an `ate exec` whose actor is being checkpointed or
// stopped: its process is killed so that it never enters a snapshot and
// never holds the checkpoint up.
var ErrExecEnded = errors.New("the actor is being suspended, paused or stopped; the exec'd process was killed")

// ErrExecUnsupported: the node's sandbox class cannot run processes in a
// running container.
var ErrExecUnsupported = errors.New("this node's sandbox class does not support exec")
