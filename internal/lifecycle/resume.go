package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/tracing"
)

// Resume makes the actor RUNNING: it claims a free worker (waiting for one
// until ctx ends) and restores, in order of preference, the actor's paused
// checkpoint (on a worker of the node that holds it), its latest durable
// snapshot, its template's golden snapshot (unless the template says
// newActors: coldBoot), or cold-boots the image.
// Concurrent calls for one actor queue on its lock and the later ones find
// it RUNNING, so an actor is restored once however many callers race.
//
// A PAUSED actor prefers a worker on its node; if that node has none free
// but another has, the paused checkpoint is uploaded to the snapshot
// store first and the upload is restored there.
//
// Resuming a CRASHED actor restores its last snapshot and says so in the
// actor's message; a PAUSED actor whose node is gone resumes from its last
// durable snapshot, and the message says that work since then was lost.
//
// Errors: store.ErrNotFound; ErrFailedPrecondition (e.g. DELETING);
// ErrNoCapacity wrapping ctx's error when no worker freed in time;
// ErrResumeFailed when the restore or boot failed — the actor is then back
// where it was (SUSPENDED, PAUSED or CRASHED) and the worker is free.
func (m *Manager) Resume(ctx context.Context, key names.ActorKey) (*store.Actor, error) {
	out, _, err := m.ResumeEvicting(ctx, key)
	return out, err
}

// Resumed is what a resume did beyond restoring the actor.
type Resumed struct {
	// Evicted is the actor checkpointed to free the worker this resume
	// got; zero when a free worker was at hand.
	Evicted names.ActorKey
}

// ResumeEvicting is Resume, also saying whether another actor was evicted
// to make room (capacity.go). Same errors as Resume.
func (m *Manager) ResumeEvicting(ctx context.Context, key names.ActorKey) (out *store.Actor, r Resumed, err error) {
	ctx, span := tracing.Span(ctx, "lifecycle.resume", attribute.String("ate.actor", key.String()))
	defer func() { tracing.End(span, err) }()
	err = m.withActor(ctx, key, func(ctx context.Context) error {
		out, err = m.resumeLocked(ctx, key, &r)
		return err
	})
	return out, r, err
}

// source is what a resume starts from.
type source struct {
	ref    string
	paused bool
	node   string // claim only on this node ("" = any)
	note   string // goes into the actor's message
	// volumes is the durable snapshot whose volumes the start restores
	// instead of ref's: the actor's own, after a template move.
	volumes string
	// kind is what the resume restores (ref, or nothing when cold).
	kind checkpoint.Source
}

// resumeLocked runs Resume holding the actor's lock; r learns what the
// resume did besides.
func (m *Manager) resumeLocked(ctx context.Context, key names.ActorKey, r *Resumed) (_ *store.Actor, err error) {
	span := trace.SpanFromContext(ctx)
	a, err := m.getSettled(ctx, key)
	if err != nil {
		return nil, err
	}
	switch a.State {
	case store.Running:
		return a, nil
	case store.Suspended, store.Crashed, store.Paused:
	default:
		return nil, fmt.Errorf("%w: actor %s is %s and cannot be resumed", ErrFailedPrecondition, a.Key(), a.State)
	}
	tpl, err := m.leasedTemplate(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("actor %s: %w", a.Key(), err)
	}
	src, err := m.sourceFor(ctx, a, tpl)
	if err != nil {
		return nil, err
	}
	prev := a.State
	span.SetAttributes(attribute.String("ate.source", src.kind.String()))
	cctx, claimSpan := tracing.Span(ctx, "lifecycle.claim")
	a, w, evicted, err := m.claim(cctx, a, src.node, m.standbyWorkers(tpl.Spec, tpl.ImageDigest))
	tracing.End(claimSpan, err)
	if err != nil {
		return nil, err
	}
	claimSpan.SetAttributes(attribute.String("ate.worker", w.Name))
	r.Evicted = evicted
	// Counted from the claim: a resume that got no worker restored
	// nothing. A paused checkpoint moved to another node still counts
	// as paused.
	claimed, kind, placedAgain := time.Now(), src.kind, false
	defer func() {
		if !placedAgain {
			m.metrics.Resume(kind, time.Since(claimed), err)
		}
	}()
	// From here the worker is ours: the node operation runs to the end
	// even if the caller gives up, and every exit frees it on failure.
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nodeOpTimeout)
	defer cancel()
	oldDurable := a.Snapshot
	if src.paused && w.Node != src.node {
		// The paused node had no free worker: the checkpoint moves only
		// once uploaded to the snapshot store.
		pausedOn, uerr := m.nodeNamed(src.node)
		ref := ""
		if uerr == nil {
			ref, uerr = pausedOn.Upload(nctx, src.ref, a.UID, m.newSnapshotID(), checkpointOptions(tpl.Spec, checkpoint.Suspend).Scope)
		}
		if uerr == nil {
			ref, uerr = reportedRef(ref, a.UID)
		}
		if uerr != nil {
			return nil, m.resumeFailed(nctx, a, prev, fmt.Errorf("upload paused checkpoint for another node: %w", uerr))
		}
		// The record points at the upload before the paused copy goes,
		// and a stays what is stored, so later writes can still merge
		// with concurrent ones (update) and a rollback lands on SUSPENDED.
		moved := *a
		moved.PausedSnapshot, moved.Node, moved.Snapshot = "", "", ref
		stored, err := m.update(nctx, a, &moved)
		if err != nil {
			m.dropSnapshot(ref)
			return nil, m.lateFinisher(nctx, a, prev, err)
		}
		_ = pausedOn.DeletePaused(src.ref)
		a, prev, src = stored, store.Suspended, source{ref: ref}
	}
	start := time.Now()
	on, err := m.nodeNamed(w.Node)
	if err != nil {
		return nil, m.resumeFailed(nctx, a, prev, err)
	}
	err = on.Start(forNode(nctx, a), nodeapi.StartRequest{Worker: a.Worker, ActorUID: a.UID, Atespace: a.Atespace, Name: a.Name,
		Spec: tpl.Spec, Snapshot: src.ref, Paused: src.paused, ImageDigest: tpl.ImageDigest, VolumesFrom: src.volumes,
		LogRun: a.Version})
	if errors.Is(err, nodeapi.ErrNotServing) {
		// Nothing started: the node's lease may be running out. Give the
		// worker back and place the actor again, on another node while
		// this one refuses (notServing), as a resume waits for capacity.
		m.notServing(w.Node)
		if _, uerr := m.unclaim(nctx, a, prev, ""); uerr != nil {
			return nil, m.resumeFailed(nctx, a, prev, err)
		}
		m.log.InfoContext(ctx, "node is not serving; placing the actor again", "actor", a.Key(), "node", w.Node, "err", err)
		placedAgain = true
		return m.resumeLocked(ctx, key, r)
	}
	if err != nil {
		return nil, m.resumeFailed(nctx, a, prev, err)
	}
	running := *a
	running.State, running.Message = store.Running, src.note
	// The token the node started the sandbox under (forNode), which
	// routers send with each request for the tunnel to match.
	running.Assignment = leaseToken(nctx, a)
	running.Reason, running.EvictedFor = "", names.ActorKey{}
	running.Resumes++
	if src.paused || prev == store.Paused {
		running.PausedSnapshot, running.Node = "", ""
	}
	out, err := m.update(nctx, a, &running)
	if err != nil {
		return nil, m.lateFinisher(nctx, a, prev, err)
	}
	if src.paused {
		// The paused copy is now older than the running actor and nothing
		// points to it; removing it (a few ms for a small actor) need not
		// delay the request that woke the actor.
		m.goOwned(func(context.Context) { _ = on.DeletePaused(src.ref) })
	}
	if out.Snapshot != oldDurable {
		m.deleteOld(ctx, a, oldDurable)
	}
	m.log.InfoContext(ctx, "actor resumed", "actor", a.Key(), "worker", a.Worker,
		"snapshot", src.ref, "paused", src.paused, "evicted", evicted, "ms", time.Since(start).Milliseconds())
	return out, nil
}

// sourceFor picks what to restore.
func (m *Manager) sourceFor(ctx context.Context, a *store.Actor, tpl *store.Template) (source, error) {
	if a.State == store.Paused && a.PausedSnapshot != "" {
		// The paused node's liveness is the registry's, in memory: a paused
		// resume scans no workers (BENCHMARKS.md, Control plane: Registered
		// workers).
		if _, alive := m.nodes.Get(a.Node); alive {
			return source{ref: a.PausedSnapshot, paused: true, node: a.Node, kind: checkpoint.SourcePaused}, nil
		}
		src := m.durableSource(a, tpl)
		src.note = fmt.Sprintf("node %s holding the paused checkpoint is gone: resumed from the last durable snapshot; work since then was lost", a.Node)
		return src, nil
	}
	src := m.durableSource(a, tpl)
	if a.State == store.Crashed {
		from := src.ref
		if from == "" {
			from = "a cold boot"
		}
		if src.volumes != "" {
			from += " with the volumes of " + src.volumes
		}
		src.note = fmt.Sprintf("resumed from %s after a crash (%s)", from, a.Message)
	}
	return src, nil
}

// The values of a template's newActors: how an actor without a snapshot
// of its own starts. Empty means NewActorsGolden for a template with an
// onRestore hook, NewActorsColdBoot for one without (NewActorsOf).
const (
	// NewActorsGolden restores the template's golden snapshot: fast, but
	// every such actor begins with the build's memory.
	NewActorsGolden = "golden"
	// NewActorsColdBoot boots the image afresh.
	NewActorsColdBoot = "coldBoot"
)

// NewActorsOf returns how new actors of spec start: its newActors, or,
// unset, NewActorsGolden when spec has an onRestore hook (which reseeds
// what the golden snapshot copied) and NewActorsColdBoot when it has
// none. Clones are safe unless a template says otherwise: a restored
// golden snapshot hands every actor the build's user-space random state,
// and a third-party server keeps its session ids, keys and nonces there,
// where nothing but its own hook could refresh them (docs/restore.md).
func NewActorsOf(spec *atev1.ActorTemplateSpec) string {
	if v := spec.GetNewActors(); v != "" {
		return v
	}
	if spec.GetOnRestore() != nil {
		return NewActorsGolden
	}
	return NewActorsColdBoot
}

// durableSource is the actor's own latest durable snapshot, else the
// template's golden snapshot when its new actors start golden
// (NewActorsOf), else a cold boot (source{}). A template whose new
// actors cold-boot never hands its golden snapshot to an actor:
// every actor restored from it would share the memory the build had,
// seeded random state included (docs/restore.md); its golden build still
// runs, since it proves the template boots and makes it READY.
//
// An actor moved to another template (VolumesOnly) starts as a new actor
// of it would, with its own snapshot's volumes.
func (m *Manager) durableSource(a *store.Actor, tpl *store.Template) source {
	if a.Snapshot != "" && !a.VolumesOnly {
		return source{ref: a.Snapshot, kind: checkpoint.SourceDurable}
	}
	src := source{kind: checkpoint.SourceCold}
	if tpl.Phase == store.TemplateReady && NewActorsOf(tpl.Spec) == NewActorsGolden {
		src = source{ref: tpl.GoldenSnapshot, kind: checkpoint.SourceGolden}
	}
	if a.VolumesOnly {
		src.volumes = a.Snapshot
		src.note = "first resume on template " + a.Template + ": volumes from snapshot " + a.Snapshot + ", memory from " + cmp.Or(src.ref, "a cold boot")
	}
	return src
}

// resumeFailed puts the actor back in the state Resume found it (minus
// the worker) and reports the cause.
func (m *Manager) resumeFailed(ctx context.Context, a *store.Actor, prev store.ActorState, cause error) error {
	if errors.Is(cause, nodeapi.ErrUnreachable) {
		// The start may have happened on a node that did not answer:
		// its sandbox may serve. Stop it before freeing the worker, or
		// leave the actor RESUMING for the next workflow to stop.
		if err := m.stopSandbox(ctx, a); err != nil {
			m.log.WarnContext(ctx, "resume failed on a node that does not answer; the actor stays RESUMING on its worker until the node answers or is declared lost",
				"actor", a.Key(), "worker", a.Worker, "err", cause)
			return fmt.Errorf("%w: %w", ErrNodeUnavailable, cause)
		}
	}
	if _, err := m.unclaim(ctx, a, prev, "resume failed: "+cause.Error()); err != nil {
		// Someone else moved the actor; free the worker if still ours.
		_ = m.store.ReleaseWorker(ctx, a.Worker, a.UID)
		m.workerFreed()
	}
	return fmt.Errorf("%w: %w", ErrResumeFailed, cause)
}

// unclaim gives back the worker of a, claimed by a resume that started
// nothing, and returns the actor to prev, the state the resume found,
// with message (none: the one it has).
func (m *Manager) unclaim(ctx context.Context, a *store.Actor, prev store.ActorState, message string) (*store.Actor, error) {
	back := *a
	back.State, back.Worker = prev, ""
	if message != "" {
		back.Message = message
	}
	out, err := m.update(ctx, a, &back)
	if err == nil {
		m.workerFreed()
	}
	return out, err
}

// lateFinisher handles a restore that succeeded on the node but whose
// RUNNING write was refused: the actor or its worker changed meanwhile
// (e.g. the worker was deleted). It never overwrites what changed: it
// stops the sandbox, and only if the record still shows this resume's
// RESUMING does it put the actor back, so it is never RUNNING without a
// worker nor SUSPENDED without its snapshot.
func (m *Manager) lateFinisher(ctx context.Context, a *store.Actor, prev store.ActorState, cause error) error {
	if err := m.stopSandbox(ctx, a); err != nil {
		// The record is left as it is (the next workflow stops the
		// sandbox); the worker stays the actor's.
		return fmt.Errorf("%w: actor %s changed during resume (%v), and its sandbox could not be stopped: %w", ErrResumeFailed, a.Key(), cause, err)
	}
	cur, err := m.store.GetActor(ctx, a.Key())
	if err == nil && cur.UID == a.UID && cur.State == store.Resuming && cur.Worker == a.Worker {
		back := *cur
		back.State, back.Worker = prev, ""
		back.Message = "worker " + a.Worker + " was lost while resuming: " + cause.Error()
		if _, uerr := m.update(ctx, cur, &back); uerr != nil {
			m.log.WarnContext(ctx, "roll back late resume", "actor", a.Key(), "err", uerr)
		}
	}
	_ = m.store.ReleaseWorker(ctx, a.Worker, a.UID)
	m.workerFreed()
	return fmt.Errorf("%w: actor %s changed during resume: %w", ErrResumeFailed, a.Key(), cause)
}
