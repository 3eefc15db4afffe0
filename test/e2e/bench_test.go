package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/latency"
)

// BenchmarkActivationSuspended measures activation through the router:
// the actor is suspended to the snapshot store (untimed), then one GET is
// timed from send to the full (tiny) response. Each iteration is one
// resume: claim a worker, restore, wakeup probe, proxy.
func BenchmarkActivationSuspended(b *testing.B) {
	in := startUp(b, 2, "--demo")
	in.mustCount("default/counter-1", 1) // untimed: the actor runs before the first suspend
	benchActivation(b, in, func() string {
		in.standbyAfter(func() { in.suspend("counter-1") })
		return "counter-1"
	})
}

// BenchmarkActivationGolden measures a new actor's first request: restore
// from the template's golden snapshot.
func BenchmarkActivationGolden(b *testing.B) {
	in := startUp(b, 2, "--demo")
	i := 0
	var name string
	benchActivation(b, in, func() string {
		if name != "" {
			in.standbyAfter(func() { in.ate("suspend", "actor", name) })
			in.ate("delete", "actor", name)
		}
		i++
		name = "golden-" + strconv.Itoa(i)
		in.ate("create", "actor", name, "--template", "counter")
		return name
	})
}

// BenchmarkActivationPaused measures activation of an actor paused on the
// node (checkpoint on the node's disk) through the router.
func BenchmarkActivationPaused(b *testing.B) {
	in := startUp(b, 2, "--demo")
	in.mustCount("default/counter-1", 1) // untimed: the actor runs before the first pause
	benchActivation(b, in, func() string {
		in.standbyAfter(func() { in.pause("counter-1") })
		return "counter-1"
	})
}

// BenchmarkActivationColdBoot measures a cold boot through the router: the
// durable-data template suspends with scope Data, so every resume boots
// the image (with its volume restored) instead of restoring memory.
func BenchmarkActivationColdBoot(b *testing.B) {
	in := startUp(b, 2)
	in.createTemplate("test/e2e/testdata/durable-data.yaml", "durable-data")
	in.ate("create", "actor", "cold", "--template", "durable-data")
	in.mustCount("default/cold", 1) // untimed: the actor runs before the first suspend
	benchActivation(b, in, func() string {
		in.standbyAfter(func() { in.suspend("cold") })
		return "cold"
	})
}

// BenchmarkWarm measures a request to a RUNNING actor through the router.
func BenchmarkWarm(b *testing.B) {
	in := startUp(b, 2, "--demo")
	in.mustCount("default/counter-1", 1)
	benchActivation(b, in, func() string { return "counter-1" })
}

// benchActivation times one GET per iteration of the actor (in the
// default atespace) that prepare, run untimed before it, names.
func benchActivation(b *testing.B, in *installation, prepare func() (actor string)) {
	var lat []time.Duration
	for b.Loop() {
		b.StopTimer()
		actor := prepare()
		b.StartTimer()
		start := time.Now()
		code, body, _, err := in.request(http.MethodGet, "default/"+actor, "/", "")
		lat = append(lat, time.Since(start))
		if err != nil || code != http.StatusOK {
			b.Fatalf("GET = %d %q %v", code, body, err)
		}
	}
	latency.Report(b, "", lat, 0.50, 0.95, 0.99)
	b.ReportMetric(0, "ns/op")
}

// BenchmarkActivationCycle measures activations that follow each other
// at once, as a user's requests come: the counter is suspended and
// requested, then paused and requested, back to back, with no wait for
// the node to prepare a standby in between (the other Activation
// benchmarks wait for one). One op is the whole cycle. suspended-* and
// paused-* are the two requests' latencies from send to full response;
// *-standby-hits the share of their restores that found a standby ready
// (ate_node_standby_starts_total).
func BenchmarkActivationCycle(b *testing.B) {
	in := startUp(b, 2, "--demo")
	in.mustCount("default/counter-1", 1) // untimed: the actor runs before the first suspend
	count := 1
	hits := func() float64 {
		v, _ := sum(b, in.scrape(), "ate_node_standby_starts_total", map[string]string{"standby": "hit"})
		return v
	}
	activate := func(lat *[]time.Duration, hit *float64) {
		before := hits()
		b.StartTimer()
		start := time.Now()
		code, body, _, err := in.request(http.MethodGet, "default/counter-1", "/", "")
		*lat = append(*lat, time.Since(start))
		b.StopTimer()
		count++
		if err != nil || code != http.StatusOK || strings.TrimSpace(body) != fmt.Sprintf("count=%d", count) {
			b.Fatalf("GET = %d %q %v, want 200 count=%d", code, body, err, count)
		}
		*hit += hits() - before
	}
	var suspended, paused []time.Duration
	var suspendedHits, pausedHits float64
	for b.Loop() {
		b.StopTimer()
		in.suspend("counter-1")
		activate(&suspended, &suspendedHits)
		in.pause("counter-1")
		activate(&paused, &pausedHits)
		b.StartTimer()
	}
	latency.Report(b, "suspended-", suspended, 0.50, 0.95, 0.99)
	latency.Report(b, "paused-", paused, 0.50, 0.95, 0.99)
	b.ReportMetric(suspendedHits/float64(len(suspended)), "suspended-standby-hits")
	b.ReportMetric(pausedHits/float64(len(paused)), "paused-standby-hits")
	b.ReportMetric(0, "ns/op")
}
