package up

import (
	"testing"

	"go.uber.org/goleak"
)

// A ControlPlane and the commands run their parts, servers and the
// embedded node on goroutines; none may outlive Close or the command.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
