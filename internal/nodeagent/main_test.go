package nodeagent

import (
	"testing"

	"go.uber.org/goleak"
)

// The agent heartbeats, the registry watches and declares nodes lost,
// and Remote streams events, each on goroutines; none may outlive the
// Agent, Registry or Remote that started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
