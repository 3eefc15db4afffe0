package nodeapi

import (
	"io"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/snapshot"
)

// StartRequest asks a worker to host an actor (Node.Start).
type StartRequest struct {
	Worker   string
	ActorUID string
	Atespace string
	Name     string
	Spec     *atev1.ActorTemplateSpec
	// Snapshot is the reference to restore; empty means a cold boot.
	// Paused says it is in the node's paused store, not the durable one.
	Snapshot string
	Paused   bool
	// VolumesFrom, when set, is a durable snapshot whose volumes fill
	// the actor's volumes instead of Snapshot's, which then gives only
	// the memory (another template's golden snapshot) or is empty (a cold
	// boot): how an actor moved to another template keeps its data
	// (docs/actors.md).
	VolumesFrom string
	// ImageDigest pins the image content (the template's); empty means
	// whatever the reference names now.
	ImageDigest string
	// LogRun numbers this start in the actor's log (actorlog.Line.Run):
	// larger for every later resume of the actor. 0 keeps no actor log
	// (golden builds).
	LogRun int64
}

// Key names the actor the request starts.
func (r StartRequest) Key() names.ActorKey { return names.ActorKey{Atespace: r.Atespace, Name: r.Name} }

// CheckpointOptions say where a checkpoint goes and what it holds
// (Node.Checkpoint).
type CheckpointOptions struct {
	// Paused keeps the checkpoint in the node's paused store instead of
	// the durable snapshot store.
	Paused bool
	// Scope is what the checkpoint holds.
	Scope snapshot.Scope
	// Grace bounds the wait for in-flight requests; 0 means the node's
	// default (node.DefaultDrainGrace).
	Grace time.Duration
	// ID is the snapshot's id (snapshot.NewID's form), minted by the
	// workflow that will record it, so that its API server's garbage
	// collection knows it as its own; empty means a new one.
	ID string
	// LeaveRunning checkpoints without stopping the actor (CheckpointLive):
	// no drain, the worker goes on hosting it. Not with Paused.
	LeaveRunning bool
	// Owner owns the new snapshot (a tag's or a fork's uid); empty means
	// the actor's uid.
	Owner string
}

// Activity is what the worker tunnel saw of one actor incarnation on a
// worker (Node.WorkerActivity): the capacity manager's view of whether
// it is idle and since when. It covers traffic through every router,
// since all of it passes the tunnel.
type Activity struct {
	// ActorUID is the incarnation hosted; Activity of another incarnation
	// is never reported for it.
	ActorUID string
	// InFlight counts requests being proxied now, Streams those of them
	// that are streams (WebSocket upgrades, Server-Sent Events), and
	// Listeners those streams that are listening streams
	// (streams.IsListen: a GET for Server-Sent Events).
	InFlight, Streams, Listeners int
	// Served counts requests that ended since the actor started here.
	Served uint64
	// Started is when the actor started (or was restored) on the worker;
	// Last is when a request last started or ended, Started if none did.
	Started, Last time.Time
}

// ExecRequest is one `ate exec` (Node.Exec): Process to run in the
// container of the actor incarnation ActorUID on Worker.
type ExecRequest struct {
	Worker, ActorUID string
	Process          Process
}

// Process is one command to run in a running container beside its main
// process (Node.Exec, and the sandbox classes' Execer).
type Process struct {
	// Args is argv[0..]; argv[0] is looked up in the container's PATH.
	// Env (KEY=VALUE) is added to the container's own environment; Cwd
	// defaults to the container's working directory.
	Args []string
	Env  []string
	Cwd  string
	// TTY runs the process on a pseudo-terminal: Stdin feeds its input,
	// Stdout receives its output (stderr included, as on any terminal),
	// Stderr is unused, and Resize, if not nil, carries window sizes.
	TTY    bool
	Resize <-chan WindowSize
	// Stdin, when not nil, is copied to the process's standard input,
	// which is closed at Stdin's EOF; nil gives it an empty input.
	Stdin io.Reader
	// Stdout and Stderr receive the process's output; nil discards it.
	Stdout, Stderr io.Writer
}

// WindowSize is a terminal's size in character cells.
type WindowSize struct{ Rows, Cols uint16 }
