package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
)

// StartGoldenBuild builds t's golden snapshot in the background, on a
// goroutine the manager owns (Close cancels and waits for it), after
// CreateTemplate.
func (m *Manager) StartGoldenBuild(t *store.Template) {
	m.goOwned(func(ctx context.Context) { m.BuildGolden(ctx, t) })
}

// BuildGolden builds t's golden snapshot and records the outcome in the
// template's status (READY with the snapshot, or FAILED with the reason).
// A build that ends because ctx did (Close) records nothing: the template
// stays BUILDING, and Recover builds it again.
func (m *Manager) BuildGolden(ctx context.Context, t *store.Template) {
	log := m.log.With("template", t.Name, "atespace", t.Atespace)
	ref, digest := "", ""
	n, err := m.builder(ctx)
	if err == nil {
		ref, digest, err = n.BuildGolden(nodeapi.WithProgress(ctx, m.buildProgress(ctx, t)), t.UID, t.Atespace, t.Name, t.Spec, m.newSnapshotID())
	}
	if err == nil && ref != "" {
		ref, err = reportedRef(ref, t.UID)
	}
	if err != nil && ctx.Err() != nil {
		log.InfoContext(ctx, "golden build cancelled; left for the next start-up", "err", err)
		return
	}
	cur, gerr := m.store.GetTemplate(ctx, t.Atespace, t.Name)
	if gerr != nil || cur.UID != t.UID {
		// The template was deleted meanwhile; nobody will use the snapshot.
		if ref != "" {
			_ = m.snaps.DeleteOwner(ctx, t.UID)
		}
		return
	}
	if err != nil {
		cur.Phase, cur.Message = store.TemplateFailed, err.Error()
		log.WarnContext(ctx, "golden build failed", "err", err)
	} else {
		// BuildPhases stay: a client that polled the BUILDING template
		// too late for the last ones (or for all, in a fast build) still
		// shows them before READY.
		cur.Phase, cur.Message, cur.GoldenSnapshot, cur.ImageDigest = store.TemplateReady, "", ref, digest
		log.InfoContext(ctx, "golden snapshot ready", "snapshot", ref)
	}
	if _, err := m.store.UpdateTemplateStatus(ctx, cur); err != nil && !errors.Is(err, context.Canceled) {
		log.WarnContext(ctx, "record golden build", "err", err)
	}
}

// buildProgress returns the ProgressFunc of t's golden build: while it is
// BUILDING, the template's BuildPhases list the phases begun so far,
// oldest first, so a client polling them (`ate create template --wait`)
// misses none (READY keeps the list). For clients older than BuildPhases, the status
// message lists the same phases' human text, joined by
// atev1.BuildPhaseSeparator. A failed write only loses a progress line.
func (m *Manager) buildProgress(ctx context.Context, t *store.Template) nodeapi.ProgressFunc {
	var begun atomic.Bool
	return func(phase nodeapi.BuildPhase) {
		cur, err := m.store.GetTemplate(ctx, t.Atespace, t.Name)
		if err != nil || cur.UID != t.UID || cur.Phase != store.TemplateBuilding {
			return
		}
		if !begun.Swap(true) {
			// This build's first phase: what the list holds is an
			// interrupted earlier attempt's (a build restarted by
			// resumeGoldenBuilds), which READY would otherwise keep
			// beside this one's.
			cur.BuildPhases, cur.Message = nil, ""
		}
		cur.BuildPhases = append(cur.BuildPhases, phase)
		if cur.Message == "" {
			cur.Message = phase.Text()
		} else {
			cur.Message += atev1.BuildPhaseSeparator + phase.Text()
		}
		if _, err := m.store.UpdateTemplateStatus(ctx, cur); err != nil {
			m.log.DebugContext(ctx, "record golden build phase", "template", t.Name, "phase", phase.Text(), "err", err)
		}
	}
}

// resumeGoldenBuilds restarts builds that a previous process did not finish.
func (m *Manager) resumeGoldenBuilds(ctx context.Context) error {
	tpls, err := m.store.ListTemplates(ctx, "")
	if err != nil {
		return err
	}
	for _, t := range tpls {
		if t.Phase == store.TemplateBuilding {
			m.StartGoldenBuild(t)
		}
	}
	return nil
}

// DeleteTemplateSnapshots removes a deleted template's golden snapshot.
func (m *Manager) DeleteTemplateSnapshots(ctx context.Context, t *store.Template) {
	if err := m.snaps.DeleteOwner(ctx, t.UID); err != nil {
		m.log.WarnContext(ctx, "delete golden snapshot", "template", t.Name, "err", err)
	}
}

// builder returns the least loaded live node to build on, waiting (until
// ctx ends) while none is registered: a template created before any node
// joined builds once one does.
func (m *Manager) builder(ctx context.Context) (nodeapi.Node, error) {
	for {
		for _, name := range m.nodes.ByLoad() {
			if n, ok := m.nodes.Get(name); ok {
				return n, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: no node registered to build on: %w", ErrNodeUnavailable, ctx.Err())
		case <-time.After(claimPoll):
		}
	}
}
