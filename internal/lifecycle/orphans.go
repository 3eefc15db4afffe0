package lifecycle

import (
	"context"
	"time"
)

// DefaultOrphanInterval is OrphanCollection.Interval's default.
const DefaultOrphanInterval = 30 * time.Second

// orphanMargin is added to a node's checkpoint bound to make the orphan
// window: a node that finished a checkpoint whose caller died uploads
// its manifest only then.
const orphanMargin = time.Minute

// OrphanCollection says which unreferenced snapshots CollectOrphans may
// take, and for how long it looks for them.
type OrphanCollection struct {
	// Since is when this process began recovering, before the API
	// served (as CollectGarbage's cutoff): only snapshots staged before
	// it can be orphans of a predecessor's workflows (snapshot.StagedBefore,
	// to the millisecond; node clocks are assumed to agree with ours to
	// well under the window: a later id is never collected).
	Since time.Time
	// Shared says other API servers' workflows run over the store: a
	// snapshot one of them staged before Since may not be recorded yet,
	// so only those older than the window are collected.
	Shared bool
	// CheckpointTimeout bounds a node's checkpoint once begun
	// (nodeagent.CheckpointTimeout). With orphanMargin it makes the
	// window after Since in which a predecessor's snapshot may still
	// appear.
	CheckpointTimeout time.Duration
	// Interval is how often it collects within the window; default
	// DefaultOrphanInterval.
	Interval time.Duration
}

// window is how long after Since a snapshot of a predecessor's workflow
// may still appear.
func (o OrphanCollection) window() time.Duration { return o.CheckpointTimeout + orphanMargin }

// cutoff is CollectGarbage's: Since, or over a shared store the window
// before it (a snapshot another replica staged then is recorded by now,
// if it ever will be).
func (o OrphanCollection) cutoff() time.Time {
	if o.Shared {
		return o.Since.Add(-o.window())
	}
	return o.Since
}

// CollectOrphans deletes the unreferenced snapshots staged before o's
// cutoff (they belong to dead workflows) at once, and then every
// o.Interval until the window after the cutoff has passed, since nodes
// may still be finishing such snapshots; later ones are this process's
// own, which its workflows record or drop themselves. Failures are
// logged; the next pass or start retries. It returns nil when done or
// when ctx ends.
func (m *Manager) CollectOrphans(ctx context.Context, o OrphanCollection) error {
	interval := o.Interval
	if interval <= 0 {
		interval = DefaultOrphanInterval
	}
	cutoff := o.cutoff()
	for {
		if err := m.CollectGarbage(ctx, cutoff); err != nil && ctx.Err() == nil {
			m.log.Warn("snapshot garbage collection", "err", err)
		}
		if time.Since(cutoff) > o.window() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}
