package up

import (
	"slices"
	"testing"
)

// TestCleanupsRunWhatIsAddedAfterTheDefer: the commands defer their
// cleanups' run before any step adds one; every cleanup added later
// runs, last added first.
func TestCleanupsRunWhatIsAddedAfterTheDefer(t *testing.T) {
	var ran []int
	func() {
		var c cleanups
		defer c.run()
		c.add(func() { ran = append(ran, 1) })
		c.add(func() { ran = append(ran, 2) })
	}()
	if want := []int{2, 1}; !slices.Equal(ran, want) {
		t.Fatalf("cleanups ran %v, want %v", ran, want)
	}
}
