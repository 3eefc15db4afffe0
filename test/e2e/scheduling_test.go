package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMultiplexing runs six counter actors on two workers, several rounds,
// suspending running actors to make room; every actor's count must equal
// its own number of requests, whatever worker it lands on.
func TestMultiplexing(t *testing.T) {
	in := startUp(t, 2)
	in.createTemplate("examples/counter/template.yaml", "counter")
	const actors, rounds = 6, 3
	for i := range actors {
		in.ate("create", "actor", fmt.Sprintf("m%d", i), "--template", "counter")
	}
	var running []string // actors holding a worker, oldest first
	workersSeen := map[string]map[string]bool{}
	lastWorker := map[string]string{}
	for r := 1; r <= rounds; r++ {
		for i := range actors {
			name := fmt.Sprintf("m%d", i)
			if len(running) == 2 {
				// Free the worker this actor did NOT use last time, so
				// that it must restore on another worker.
				evict := 0
				if in.actor(running[0]).GetWorker() == lastWorker[name] {
					evict = 1
				}
				in.ate("suspend", "actor", running[evict])
				running = append(running[:evict:evict], running[evict+1:]...)
			}
			in.mustCount("default/"+name, r)
			running = append(running, name)
			w := in.actor(name).GetWorker()
			if workersSeen[name] == nil {
				workersSeen[name] = map[string]bool{}
			}
			workersSeen[name][w] = true
			lastWorker[name] = w
		}
	}
	moved := 0
	for _, ws := range workersSeen {
		if len(ws) > 1 {
			moved++
		}
	}
	if moved == 0 {
		t.Fatalf("no actor ever changed worker; restores were not exercised across workers: %v", workersSeen)
	}
}

// TestCoalescedResume sends 30 concurrent requests to one suspended actor:
// every one is answered 200 and exactly one restore happens (the actor's
// resume counter, kept by the API server, grows by one).
func TestCoalescedResume(t *testing.T) {
	in := startUp(t, 2, "--demo")
	in.mustCount("default/counter-1", 1)
	in.ate("suspend", "actor", "counter-1")
	before := in.actor("counter-1").GetResumes()

	const n = 30
	seen := map[string]bool{}
	for i, r := range in.burst(n, "default/counter-1", "/") {
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("request %d = %d %q %v", i, r.code, r.body, r.err)
		}
		if seen[r.body] {
			t.Fatalf("two requests got %q", r.body)
		}
		seen[r.body] = true
	}
	for c := 2; c <= n+1; c++ {
		if !seen[fmt.Sprintf("count=%d", c)] {
			t.Fatalf("no request saw count=%d: %v", c, seen)
		}
	}
	if got := in.actor("counter-1").GetResumes(); got != before+1 {
		t.Fatalf("resumes went from %d to %d, want exactly one restore", before, got)
	}
}

// TestParkedUntilWorkerFrees: with both workers busy, a request for a
// suspended actor waits, and is served once another client suspends one of
// the busy actors.
func TestParkedUntilWorkerFrees(t *testing.T) {
	in := startUp(t, 2)
	in.createTemplate("examples/counter/template.yaml", "counter")
	for _, n := range []string{"busy-a", "busy-b", "waiter"} {
		in.ate("create", "actor", n, "--template", "counter")
	}
	in.mustCount("default/busy-a", 1)
	in.mustCount("default/busy-b", 1)

	done := make(chan reply, 1)
	go func() {
		done <- in.getReply("default/waiter", "/")
	}()
	// The request is parked once the API server is waiting for a worker
	// on its behalf; the router reports that in its log.
	waitFor(t, "the waiter's request to be parked", 30*time.Second, func() bool {
		return strings.Contains(in.logText(), `"waiting for a free worker"`) && strings.Contains(in.logText(), "waiter")
	})
	select {
	case r := <-done:
		t.Fatalf("request finished while no worker was free: %+v", r)
	default:
	}
	suspendAt := time.Now()
	in.suspend("busy-a")
	r := <-done
	if r.err != nil || r.code != http.StatusOK || r.body != "count=1" {
		t.Fatalf("parked request = %d %q %v", r.code, r.body, r.err)
	}
	if r.at.Before(suspendAt) {
		t.Fatal("parked request was served before a worker was freed")
	}
}
