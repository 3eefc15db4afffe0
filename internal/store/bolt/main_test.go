package bolt

import (
	"testing"

	"go.uber.org/goleak"
)

// The committer's loop runs until Close; none may outlive a Store.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
