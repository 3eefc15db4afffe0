package pki

import (
	"testing"

	"go.uber.org/goleak"
)

// Sources renew and re-read on goroutines until their context ends, and
// the transports' tests serve TLS; none may outlive a test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
