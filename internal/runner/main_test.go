package runner

import (
	"testing"

	"go.uber.org/goleak"
)

// Run starts a goroutine per part; none may outlive Run.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
