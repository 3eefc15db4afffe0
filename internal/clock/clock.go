// Package clock is the wall clock a process's times for other machines
// are read from: record times, snapshot ids, a heartbeat's activity.
// It is time.Now, unless a test built with the atetestclock tag set an
// offset (offset_test_hook.go): how the end-to-end tests run a replica
// or node whose clock is hours off, or jumps, since Linux's time
// namespaces do not move the wall clock. Durations a process measures
// itself (leases, timeouts) stay on time.Now's monotonic clock, as they
// do under a real clock step.
package clock

import (
	"sync/atomic"
	"time"
)

// offset is added to the wall clock (nanoseconds).
var offset atomic.Int64

// Now is time.Now on this process's wall clock.
func Now() time.Time { return time.Now().Add(time.Duration(offset.Load())) }

// Since is time.Since on this process's wall clock, for a time read
// from a record or a message.
func Since(t time.Time) time.Duration { return Now().Round(0).Sub(t) }

// Wall is t, a reading of time.Now, on this process's wall clock.
func Wall(t time.Time) time.Time { return t.Add(time.Duration(offset.Load())) }
