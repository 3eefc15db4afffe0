//go:build atetestclock

package clock

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// With the atetestclock build tag (the end-to-end tests' build only),
// ATE_TEST_CLOCK_OFFSET sets the offset (a Go duration, "-3h"), and
// ATE_TEST_CLOCK_OFFSET_FILE names a file holding one, read every
// 100 ms: a test writes it to make the clock jump.
func init() {
	if v := os.Getenv("ATE_TEST_CLOCK_OFFSET"); v != "" {
		set(v)
	}
	if f := os.Getenv("ATE_TEST_CLOCK_OFFSET_FILE"); f != "" {
		go func() {
			for {
				if b, err := os.ReadFile(f); err == nil {
					set(strings.TrimSpace(string(b)))
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
}

func set(v string) {
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ATE_TEST_CLOCK_OFFSET %q: %v\n", v, err)
		os.Exit(2)
	}
	offset.Store(int64(d))
}
