package node

import (
	"testing"

	"go.uber.org/goleak"
)

// A node watches workers, relays tunnels and cuts connections on
// goroutines; none may outlive the Node or the call that started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
