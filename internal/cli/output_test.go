package cli

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
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
