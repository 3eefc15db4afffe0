package router

import (
	"testing"

	"go.uber.org/goleak"
)

// The router starts goroutines per request and per shared resume; none may
// outlive the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
