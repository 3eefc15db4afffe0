package metrics

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/store"
)

// counting is a record store that counts actors, cancelling cancel once
// it has.
type counting struct {
	store.Store
	cancel context.CancelFunc
}

func (c counting) CountActors(context.Context) (map[store.ActorState]int, error) {
	c.cancel()
	return map[store.ActorState]int{store.Running: 2}, nil
}

// TestMetricsRunActorCounts: a store that counts sets
// ate_lifecycle_actors; one that cannot is logged once and waited out,
// as is a process without metrics. Each returns nil when ctx ends.
func TestMetricsRunActorCounts(t *testing.T) {
	for _, c := range []struct {
		name        string
		metrics     bool
		counts      bool
		wantRunning float64
		wantWarning bool
	}{
		{name: "counting store", metrics: true, counts: true, wantRunning: 2},
		{name: "store that cannot count", metrics: true, wantWarning: true},
		{name: "no metrics", counts: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			var st store.Store = struct{ store.Store }{}
			if c.counts {
				st = counting{cancel: cancel}
			}
			if !c.counts || !c.metrics {
				// Nothing counts: it waits for ctx, which has ended.
				cancel()
			}
			var m *Metrics
			if c.metrics {
				m = New()
			}
			var logs bytes.Buffer
			if err := m.RunActorCounts(ctx, st, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
				t.Fatalf("RunActorCounts = %v", err)
			}
			if ctx.Err() == context.DeadlineExceeded {
				t.Fatal("RunActorCounts did not count")
			}
			if warned := strings.Contains(logs.String(), "cannot count actors"); warned != c.wantWarning {
				t.Errorf("warning logged %v, want %v:\n%s", warned, c.wantWarning, logs.String())
			}
			if m == nil {
				return
			}
			// Left unset (a store that cannot count) it is not gathered: 0.
			if got, _ := metricValue(t, m, "ate_lifecycle_actors", map[string]string{"state": "running"}); got != c.wantRunning {
				t.Errorf("ate_lifecycle_actors{state=running} = %v, want %v", got, c.wantRunning)
			}
		})
	}
}
