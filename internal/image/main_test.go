package image

import (
	"log/slog"
	"testing"

	"go.uber.org/goleak"
)

// Unpacks run on singleflight goroutines and mutate.Extract streams through
// a goroutine; none may outlive a test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var discard = slog.New(slog.DiscardHandler)
