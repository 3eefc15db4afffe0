package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
)

// MoveTemplate moves a SUSPENDED or CRASHED actor to template to of its
// atespace (docs/actors.md, Template upgrades): its durable data carries
// over, its memory does not. The actor's snapshot stays its own, marked
// VolumesOnly, so its next resume starts from to's golden snapshot (or
// cold-boots) and fills the volumes from that snapshot; nothing is copied
// now. Moving to the actor's own template is a no-op.
//
// It holds the actor's lock and lease, so a resume racing the move
// either runs first (the move then finds the actor RUNNING and refuses)
// or after it (and starts from to).
//
// Errors: store.ErrNotFound (actor or template); ErrFailedPrecondition
// when the actor is not SUSPENDED or CRASHED (say: suspend first), holds
// only a node-local paused checkpoint, or when to differs from the
// actor's template in sandbox class, volumes or mounts (the message names
// them), or its golden build failed.
func (m *Manager) MoveTemplate(ctx context.Context, key names.ActorKey, to string) (out *store.Actor, err error) {
	err = m.withActor(ctx, key, func(ctx context.Context) error {
		a, err := m.getSettled(ctx, key)
		if err != nil {
			return err
		}
		if a.Template == to {
			out = a
			return nil
		}
		if err := movable(a); err != nil {
			return err
		}
		from, err := m.leasedTemplate(ctx, a)
		if err != nil {
			return fmt.Errorf("actor %s: template %s: %w", key, a.Template, err)
		}
		next, err := m.store.GetTemplate(ctx, a.Atespace, to)
		if err != nil {
			return fmt.Errorf("template %s/%s: %w", a.Atespace, to, err)
		}
		if next.Phase == store.TemplateFailed {
			return fmt.Errorf("%w: template %s's golden build failed (%s): create a template that builds, then move the actor", ErrFailedPrecondition, to, next.Message)
		}
		if err := SameData(from.Spec, next.Spec); err != nil {
			return fmt.Errorf("%w: cannot move actor %s from template %s to %s: %w", ErrFailedPrecondition, key, from.Name, to, err)
		}
		out, err = m.writeTemplate(ctx, a, to)
		if err == nil {
			m.log.InfoContext(ctx, "actor moved to another template", "actor", key, "from", from.Name, "to", to,
				"snapshot", a.Snapshot)
		}
		return err
	})
	return out, err
}

// movable says why a's state does not allow a template move, or nil.
func movable(a *store.Actor) error {
	switch {
	case a.State == store.Paused && a.PausedSnapshot != "":
		return fmt.Errorf("%w: actor %s is PAUSED and its latest state is only in a node-local checkpoint: suspend it first (ate suspend actor %s -n %s) to make it durable, then move it",
			ErrFailedPrecondition, a.Key(), a.Name, a.Atespace)
	case a.State == store.Suspended, a.State == store.Crashed:
		return nil
	default:
		return fmt.Errorf("%w: actor %s is %s: suspend it first (ate suspend actor %s -n %s), then move it; a template move drops memory, so it never happens to a live actor",
			ErrFailedPrecondition, a.Key(), a.State, a.Name, a.Atespace)
	}
}

// writeTemplate writes a moved to template to, marking its snapshot
// VolumesOnly. It is compare-and-set, re-read on a conflict with a
// write that left the lifecycle fields alone (the router's activity).
func (m *Manager) writeTemplate(ctx context.Context, a *store.Actor, to string) (*store.Actor, error) {
	for attempt := 0; ; attempt++ {
		n := *a
		n.Template, n.VolumesOnly = to, a.VolumesOnly || a.Snapshot != ""
		n.Message = "moved from template " + a.Template + ": the next resume starts from " + to + " with the actor's volumes"
		out, err := m.store.UpdateActor(ctx, &n)
		if !errors.Is(err, store.ErrConflict) || attempt == 5 {
			return out, err
		}
		cur, gerr := m.store.GetActor(ctx, a.Key())
		if gerr != nil || !sameLifecycle(cur, a) || cur.Template != a.Template {
			return nil, err
		}
		a = cur
	}
}

// SameData reports, as an error naming each difference, whether an actor
// of template from can move to template to keeping its data: the same
// sandbox class, the same durable volumes (by name) and the same mounts
// (container, volume, path). Nil when it can. Container names must match
// too, since mounts belong to them.
func SameData(from, to *atev1.ActorTemplateSpec) error {
	var diffs []string
	if a, b := sandboxClass(from), sandboxClass(to); a != b {
		diffs = append(diffs, fmt.Sprintf("sandbox class %s vs %s", a, b))
	}
	if a, b := volumeNames(from), volumeNames(to); !slices.Equal(a, b) {
		diffs = append(diffs, fmt.Sprintf("volumes [%s] vs [%s]", strings.Join(a, ", "), strings.Join(b, ", ")))
	}
	if a, b := mounts(from), mounts(to); !slices.Equal(a, b) {
		diffs = append(diffs, fmt.Sprintf("volume mounts [%s] vs [%s]", strings.Join(a, ", "), strings.Join(b, ", ")))
	}
	if len(diffs) == 0 {
		return nil
	}
	return errors.New("the templates' data differ: " + strings.Join(diffs, "; ") + " (a move keeps volumes, so both templates must declare and mount the same ones)")
}

func sandboxClass(s *atev1.ActorTemplateSpec) nodeapi.Class {
	return nodeapi.ClassOf(s.GetSandboxClass())
}

func volumeNames(s *atev1.ActorTemplateSpec) []string {
	var out []string
	for _, v := range s.GetVolumes() {
		out = append(out, v.GetName())
	}
	slices.Sort(out)
	return out
}

// mounts lists "container:volume@path" for every volume mount, sorted.
func mounts(s *atev1.ActorTemplateSpec) []string {
	var out []string
	for _, c := range s.GetContainers() {
		for _, vm := range c.GetVolumeMounts() {
			out = append(out, c.GetName()+":"+vm.GetName()+"@"+vm.GetMountPath())
		}
	}
	slices.Sort(out)
	return out
}
