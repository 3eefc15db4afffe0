package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

// Tag takes tag, a new tag of the actor key (tag's Atespace, Name, UID
// and CreateTime set by the caller), and returns it as stored: its own
// snapshot (snapshotFor) owned by tag.UID, with the actor's template.
// Errors: store.ErrAlreadyExists for a tag name in use (checked before
// any checkpoint, and again by the store), store.ErrNotFound for an
// unknown actor, ErrFailedPrecondition as snapshotFor says.
func (m *Manager) Tag(ctx context.Context, key names.ActorKey, tag *store.Tag) (*store.Tag, error) {
	if _, err := m.store.GetTag(ctx, tag.Atespace, tag.Name); err == nil {
		return nil, fmt.Errorf("tag %s/%s: %w", tag.Atespace, tag.Name, store.ErrAlreadyExists)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	out, start := *tag, time.Now()
	err := m.withActor(ctx, key, func(ctx context.Context) error {
		a, err := m.getSettled(ctx, key)
		if err != nil {
			return err
		}
		ref, err := m.snapshotFor(ctx, a, tag.UID)
		if err != nil {
			return err
		}
		out.Actor, out.ActorUID, out.Template, out.Snapshot, out.VolumesOnly = a.Name, a.UID, a.Template, ref, a.VolumesOnly
		if err := m.store.CreateTag(ctx, &out); err != nil {
			m.dropSnapshot(ref)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.log.InfoContext(ctx, "actor tagged", "actor", key, "tag", out.Name, "snapshot", out.Snapshot, "duration", time.Since(start))
	return &out, nil
}

// DeleteTag deletes the tag and then its snapshot. Forks of it hold
// their own copies and are not affected. A snapshot left by a failed
// delete is garbage collected (no record points at it).
func (m *Manager) DeleteTag(ctx context.Context, atespace, name string) error {
	t, err := m.store.GetTag(ctx, atespace, name)
	if err != nil {
		return err
	}
	if err := m.store.DeleteTag(ctx, atespace, name, t.UID); err != nil {
		return err
	}
	if err := m.snaps.DeleteOwner(ctx, t.UID); err != nil {
		m.log.WarnContext(ctx, "delete tag snapshot", "tag", atespace+"/"+name, "snapshot", t.Snapshot, "err", err)
	}
	return nil
}

// ForkSource is where a forked actor starts from: a tag of its atespace,
// or another actor of it (exactly one is set).
type ForkSource struct {
	Tag, Actor string
}

// Fork creates a, a new SUSPENDED actor (the caller sets its atespace,
// name, uid, selector and times; its template when empty comes from the
// source), whose snapshot is its own copy of src's state: a tag's
// snapshot cloned, or an actor's taken as Tag takes it. Its first resume
// restores that memory and those volumes under its own identity. Errors:
// store.ErrNotFound for an unknown tag or source actor (or atespace),
// store.ErrAlreadyExists for a's name in use, ErrFailedPrecondition for a
// template other than the source's or a source with no state yet.
func (m *Manager) Fork(ctx context.Context, a *store.Actor, src ForkSource) (*store.Actor, error) {
	out := *a
	out.State = store.Suspended
	out.Message = "forked from actor " + src.Actor
	var err error
	if src.Tag != "" {
		out.Message = "forked from tag " + src.Tag
		err = m.forkTag(ctx, &out, src.Tag)
	} else {
		key := names.ActorKey{Atespace: a.Atespace, Name: src.Actor}
		err = m.withActor(ctx, key, func(ctx context.Context) error {
			from, err := m.getSettled(ctx, key)
			if err != nil {
				return err
			}
			if err := sameTemplate(&out, from.Template, "actor "+from.Name); err != nil {
				return err
			}
			ref, err := m.snapshotFor(ctx, from, out.UID)
			if err != nil {
				return err
			}
			out.Snapshot, out.VolumesOnly = ref, from.VolumesOnly
			return nil
		})
	}
	if err != nil {
		return nil, err
	}
	if err := m.store.CreateActor(ctx, &out); err != nil {
		if derr := m.snaps.DeleteOwner(ctx, out.UID); derr != nil {
			m.log.WarnContext(ctx, "delete snapshot of a fork not created", "actor", out.Key(), "err", derr)
		}
		return nil, err
	}
	m.log.InfoContext(ctx, "actor forked", "actor", out.Key(), "fromTag", src.Tag, "fromActor", src.Actor, "snapshot", out.Snapshot)
	return &out, nil
}

// forkTag points a at its own clone of tag's snapshot.
func (m *Manager) forkTag(ctx context.Context, a *store.Actor, tag string) error {
	t, err := m.store.GetTag(ctx, a.Atespace, tag)
	if err != nil {
		return err
	}
	if err := sameTemplate(a, t.Template, "tag "+t.Name); err != nil {
		return err
	}
	ref, err := m.snaps.Clone(ctx, t.Snapshot, a.UID, m.newSnapshotID())
	if errors.Is(err, snapshot.ErrNotFound) {
		return fmt.Errorf("tag %s/%s was deleted meanwhile: %w", a.Atespace, tag, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("copy tag %s/%s's snapshot: %w", a.Atespace, tag, err)
	}
	a.Snapshot, a.VolumesOnly = ref, t.VolumesOnly
	return nil
}

// sameTemplate sets a's template to the source's, refusing another one:
// a snapshot restores only under the template it was taken with.
func sameTemplate(a *store.Actor, template, source string) error {
	if a.Template != "" && a.Template != template {
		return fmt.Errorf("%w: %s runs template %s, not %s; a fork runs its source's template (leave it out, or move the fork afterwards: ate update actor --template)",
			ErrFailedPrecondition, source, template, a.Template)
	}
	a.Template = template
	return nil
}

// snapshotFor writes a new durable snapshot of a's current state owned
// by owner and returns its reference, leaving a as it is: RUNNING, a
// checkpoint that leaves it running (nodeapi.CheckpointOptions.LeaveRunning,
// scope from its template's onSuspend); PAUSED, an upload of its paused
// copy; SUSPENDED or CRASHED, a clone of its latest durable snapshot.
// The caller holds a's lock and lease, so no workflow moves or deletes
// what is copied meanwhile. ErrFailedPrecondition when a has no state to
// copy (never suspended: it would start from its golden snapshot; create
// an actor of its template instead) or is being deleted.
func (m *Manager) snapshotFor(ctx context.Context, a *store.Actor, owner string) (string, error) {
	id := m.newSnapshotID()
	switch a.State {
	case store.Running:
		on, err := m.nodeOf(a.Worker)
		if err != nil {
			return "", err
		}
		// Renewed, durably, before the node sees the lease's token:
		// no durable write of this workflow precedes the call, and a
		// token handed out by a write the store could lose in a crash
		// might be handed out again, lower than what the node keeps.
		if err := m.renewBeforeNodeCall(ctx); err != nil {
			return "", err
		}
		if err := m.beatFresh(); err != nil {
			return "", err
		}
		opts, _ := m.checkpointOptionsFor(ctx, a, checkpoint.Suspend)
		opts.ID, opts.LeaveRunning, opts.Owner = id, true, owner
		ref, err := on.Checkpoint(forNode(context.WithoutCancel(ctx), a), a.Worker, a.UID, opts)
		if err != nil {
			return "", err
		}
		return reportedRef(ref, owner)
	case store.Paused:
		on, err := m.nodeNamed(a.Node)
		if err != nil {
			return "", err
		}
		opts, _ := m.checkpointOptionsFor(ctx, a, checkpoint.Suspend)
		ref, err := on.Upload(ctx, a.PausedSnapshot, owner, id, opts.Scope)
		if err != nil {
			return "", err
		}
		return reportedRef(ref, owner)
	case store.Suspended, store.Crashed:
		if a.Snapshot == "" {
			return "", fmt.Errorf("%w: actor %s has no snapshot of its own yet (it would start from its template's golden snapshot); resume it first",
				ErrFailedPrecondition, a.Key())
		}
		return m.snaps.Clone(ctx, a.Snapshot, owner, id)
	default:
		return "", fmt.Errorf("%w: actor %s is %s", ErrFailedPrecondition, a.Key(), a.State)
	}
}
