package actorlog

import (
	"testing"

	"go.uber.org/goleak"
)

// A Capture pumps on its own goroutine until it ends; none may outlive
// the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
