// Package nodeapi is the node contract: what the control plane asks of a
// node (Node, and Nodes to find one), what a node tells the control
// plane (Events), and the words both sides share — the requests and
// results those calls carry, the node errors callers test with
// errors.Is, a golden build's phases and the sandbox class names.
//
// It is transport-neutral. The node protocol (internal/nodeagent)
// carries it over gRPC: on the API server's side nodeagent.Remote is a
// Node and nodeagent.Registry the Nodes and the caller of Events; on the
// node's side nodeagent.Server serves a Node, the node agent's
// *node.Node. The control plane (internal/lifecycle, whose *Manager
// implements Events, and internal/apiserver) and the CLI import this
// package and neither the node's implementation nor its transport
// (internal/archtest, TestLayers).
//
// It imports only the wire types and the shared words of records,
// snapshots, checkpoints and actor logs, never a side of the contract.
package nodeapi

import (
	"context"
	"io"
	"io/fs"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/actorlog"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

// Node is a node agent as the control plane uses it: the steps of the
// lifecycle workflows, and `ate exec` and `ate cp` on an actor it hosts.
// Errors are this package's (ErrStale, ErrStartFailed, …) or, for
// snapshots, internal/snapshot's, so errors.Is holds across the wire.
// Implementations are safe for concurrent use.
type Node interface {
	Name() string
	// Start brings req's actor up on req.Worker and returns once its
	// wakeup probe passed (and, after a restore, its onRestore hook).
	Start(ctx context.Context, req StartRequest) error
	// Checkpoint snapshots the actor actorUID on worker as opts say and
	// returns the committed snapshot's reference.
	Checkpoint(ctx context.Context, worker, actorUID string, opts CheckpointOptions) (string, error)
	Stop(ctx context.Context, worker, actorUID string) error
	// FenceActor records the lease token ctx carries (WithFence) as the
	// newest for actorUID without touching its sandbox, so the node
	// refuses older ones from then on; ErrFenced if it has seen a newer
	// one.
	FenceActor(ctx context.Context, actorUID string) error
	// BuildGolden boots a template's image on the node's build slot and
	// checkpoints it; ctx's ProgressFunc (WithProgress) is told each
	// phase.
	BuildGolden(ctx context.Context, tplUID, atespace, tplName string, spec *atev1.ActorTemplateSpec, snapshotID string) (ref, digest string, err error)
	// Upload copies a checkpoint paused on the node into the durable
	// snapshot store under owner.
	Upload(ctx context.Context, pausedRef, owner, snapshotID string, scope snapshot.Scope) (string, error)
	DeletePaused(ref string) error
	ForgetActor(actorUID string)
	// HostedActors maps each of the node's workers that hosts an actor
	// to the actor's uid, as of the call.
	HostedActors(ctx context.Context) (map[string]string, error)
	// StandbyWorkers lists the node's free workers holding a sandbox
	// prepared for spec (from image imageDigest); claims prefer them.
	StandbyWorkers(spec *atev1.ActorTemplateSpec, imageDigest string) []string
	// WorkerActivity is what the worker tunnel saw of the actor worker
	// hosts (ok false when none); eviction picks victims by it.
	WorkerActivity(worker string) (Activity, bool)
	// ReadActorLogs returns the lines of the actor's log the node keeps
	// after the cursor, in order, at most limit (0: all).
	ReadActorLogs(ctx context.Context, actorUID string, after actorlog.Cursor, limit int) ([]actorlog.Line, error)

	// Exec runs req.Process in the running container of req.ActorUID
	// and returns its exit code (`ate exec`).
	Exec(ctx context.Context, req ExecRequest) (int, error)
	// CopyIn writes r to path in one of the actor's volumes, CopyOut
	// path's content to w (`ate cp`); both return the bytes copied.
	CopyIn(ctx context.Context, worker, actorUID, path string, mode fs.FileMode, r io.Reader) (int64, error)
	CopyOut(ctx context.Context, worker, actorUID, path string, w io.Writer) (int64, error)
}

// Nodes finds the nodes workflows run on: those registered with the API
// server (nodeagent.Registry), `ate up`'s own among them.
// Implementations are safe for concurrent use.
type Nodes interface {
	// Get returns the live node named name; ok is false when no node of
	// that name is registered and heartbeating.
	Get(name string) (n Node, ok bool)
	// ForWorker returns the live node that owns worker.
	ForWorker(worker string) (n Node, ok bool)
	// ByLoad returns the names of the live nodes that take new actors
	// (not draining), the least loaded (fewest actors hosted per worker)
	// first: the order new actors are placed in.
	ByLoad() []string
	// All returns every live node.
	All() []Node
	// Lost reports whether worker's node has been declared lost (its
	// lease in the record store ran out, so it serves nothing until it is
	// welcomed again and told what to stop), or no node known owns the
	// worker. A node that merely cannot be reached, or is known only
	// from the store, is not lost: a sandbox there may still serve.
	Lost(worker string) bool
}

// Events is what nodes tell the control plane, as the node registry
// (nodeagent.Registry) hands it on: what a node reports of its workers
// (a sandbox that exited, an idle actor, an actor's own request, a
// drain) and what the registry concludes from a node's registration or
// its silence (workers lost, claims not hosted). *lifecycle.Manager
// implements it. The registry calls it from its streams' goroutines;
// implementations are safe for concurrent use.
type Events interface {
	// WorkerExited: the sandbox of actorUID on worker died on its own.
	WorkerExited(worker, actorUID string)
	// WorkerIdle: the actor on worker has no request in flight any more.
	WorkerIdle(worker string)
	// SelfRequest: actorUID on worker asks, from inside its sandbox, to
	// be put away by action.
	SelfRequest(worker, actorUID string, action checkpoint.Action)
	// WorkersLost: workers are gone with their sandboxes (their node
	// fell silent, left, or came back as a new process without them);
	// why is the message for the actors that held them.
	WorkersLost(ctx context.Context, workers []*store.Worker, why string) error
	// ClaimsNotHosted: node's hello shows these claimed workers not
	// hosting the actor the store gives them.
	ClaimsNotHosted(ctx context.Context, node string, workers []*store.Worker, why string) error
	// SuspendNode: the node drains; put away everything it has (its
	// running actors, the checkpoints paused on its disk).
	SuspendNode(ctx context.Context, node string) error
}
