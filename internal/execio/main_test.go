package execio

import (
	"testing"

	"go.uber.org/goleak"
)

// Serve and Call relay on goroutines; none may outlive the exec.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
