package cli

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
)

func TestAge(t *testing.T) {
	for _, tc := range []struct {
		ago  time.Duration
		want string
	}{
		{0, "0s"}, {-time.Minute, "0s"}, {90 * time.Second, "90s"}, {5 * time.Minute, "5m"},
		{119 * time.Minute, "119m"}, {3 * time.Hour, "3h"}, {47 * time.Hour, "47h"},
		{72 * time.Hour, "3d"}, {400 * 24 * time.Hour, "400d"}, {3 * 365 * 24 * time.Hour, "3y"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := age(testNow, timestamppb.New(testNow.Add(-tc.ago))); got != tc.want {
				t.Errorf("age(%s) = %q, want %q", tc.ago, got, tc.want)
			}
		})
	}
	if got := age(testNow, nil); got != "" {
		t.Errorf("age(nil) = %q, want empty", got)
	}
}

// TestReason: an eviction for an actor the caller may not see (the API
// left evicted_for empty) reads "evicted", not "evicted for ".
func TestReason(t *testing.T) {
	for _, tc := range []struct {
		actor *atev1.Actor
		want  string
	}{
		{&atev1.Actor{Reason: atev1.CheckpointReason_EVICTED, EvictedFor: "team/web"}, "evicted for team/web"},
		{&atev1.Actor{Reason: atev1.CheckpointReason_EVICTED}, "evicted"},
		{&atev1.Actor{Reason: atev1.CheckpointReason_IDLE}, "idle"},
		{&atev1.Actor{}, ""},
	} {
		if got := reason(tc.actor); got != tc.want {
			t.Errorf("reason(%v) = %q, want %q", tc.actor, got, tc.want)
		}
	}
}
