package httpserve

import (
	"testing"

	"go.uber.org/goleak"
)

// Servers start goroutines per connection; none may outlive the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
