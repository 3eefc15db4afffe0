package nodeagent

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestActivityReadOnTheNodesClock: a heartbeat's activity times are the
// node's clock, here an hour off ours either way; the API server reads
// them as durations before the heartbeat's sent time, so an actor that
// served 10 s ago on the node looks idle for about 10 s, not for an
// hour (checkpointed at once) or for minus one (never).
func TestActivityReadOnTheNodesClock(t *testing.T) {
	for _, off := range []time.Duration{time.Hour, -time.Hour, 0} {
		r := newRemote("n1", nil)
		nodeNow := time.Now().Add(off)
		r.heard(&atev1.NodeHeartbeat{Sent: timestamppb.New(nodeNow), Activity: []*atev1.WorkerActivity{{
			Worker: "w0", ActorUid: "a", Started: timestamppb.New(nodeNow.Add(-time.Minute)), Last: timestamppb.New(nodeNow.Add(-10 * time.Second)),
		}}})
		act, ok := r.WorkerActivity("w0")
		if !ok {
			t.Fatal("no activity for w0")
		}
		// Only the time the test itself took may add to the 10 s.
		if idle := time.Since(act.Last); idle < 10*time.Second || idle > 15*time.Second {
			t.Errorf("node clock %s off ours: idle for %s, want about 10 s", off, idle)
		}
		if up := time.Since(act.Started); up < time.Minute || up > time.Minute+5*time.Second {
			t.Errorf("node clock %s off ours: started %s ago, want about 1 min", off, up)
		}
	}
}
