package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"substrate.dev/ate/internal/latency"
)

// BenchmarkActivationEvictedSuspend and BenchmarkActivationEvictedPause
// measure activation through the router when no worker is free: one
// worker, two actors taking turns, so every timed GET evicts the other
// actor (checkpoint with the template's idle action) and restores its
// own, from send to the full response.
func BenchmarkActivationEvictedSuspend(b *testing.B) { benchEvicted(b, "suspend") }

// BenchmarkActivationEvictedPause is BenchmarkActivationEvictedSuspend
// with pause as the idle action.
func BenchmarkActivationEvictedPause(b *testing.B) { benchEvicted(b, "pause") }

func benchEvicted(b *testing.B, action string) {
	in := startUp(b, 1)
	in.counterTemplate("turns", nil, fmt.Sprintf("idle: {after: 1h, action: %s}\n", action))
	actors := []string{"turn-a", "turn-b"}
	for _, a := range actors {
		in.ate("create", "actor", a, "--template", "turns")
	}
	// Untimed: both have run once, so each timed GET restores a snapshot
	// of its own rather than the golden one.
	in.mustCount("default/turn-a", 1)
	in.mustCount("default/turn-b", 1)
	var lat []time.Duration
	i := 0
	for b.Loop() {
		actor := actors[i%2]
		i++
		start := time.Now()
		code, body, hdr, err := in.request(http.MethodGet, "default/"+actor, "/", "")
		lat = append(lat, time.Since(start))
		if err != nil || code != http.StatusOK {
			b.Fatalf("GET %s = %d %q %v", actor, code, body, err)
		}
		if act := hdr.Get("Ate-Activation"); !strings.HasSuffix(act, ";evicted") {
			b.Fatalf("GET %s: Ate-Activation %q, want an eviction", actor, act)
		}
	}
	latency.Report(b, "", lat, 0.50, 0.95, 0.99)
	b.ReportMetric(0, "ns/op")
}

// BenchmarkEvictionLoad is the 8-actors-on-2-workers scenario: per
// iteration 16 concurrent clients send 200 GETs spread round-robin over
// 8 counter actors, so most requests find their actor evicted. It reports
// the completed requests per second and the latency of each GET; any
// answer but 200 fails it.
func BenchmarkEvictionLoad(b *testing.B) {
	const actors, clients, requests = 8, 16, 200
	in := startUp(b, 2, "--demo")
	for i := 2; i <= actors; i++ {
		in.ate("create", "actor", fmt.Sprintf("counter-%d", i), "--template", "counter")
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 2 * time.Minute}
	var lat []time.Duration
	var mu sync.Mutex
	var elapsed time.Duration
	for b.Loop() {
		next := make(chan int, requests)
		for i := range requests {
			next <- i
		}
		close(next)
		errs := make(chan error, requests)
		start := time.Now()
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for i := range next {
					actor := fmt.Sprintf("default/counter-%d", i%actors+1)
					t0 := time.Now()
					err := benchGet(client, in.routerURL()+"/", actor)
					mu.Lock()
					lat = append(lat, time.Since(t0))
					mu.Unlock()
					if err != nil {
						errs <- fmt.Errorf("%s: %w", actor, err)
					}
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	latency.Report(b, "", lat, 0.50, 0.95, 0.99)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
	b.ReportMetric(0, "ns/op")
}
