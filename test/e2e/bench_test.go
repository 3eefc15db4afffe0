package e2e

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"

	"substrate.dev/ate/internal/latency"
)

// BenchmarkActivationSuspended measures activation through the router:
// the actor is suspended to the snapshot store (untimed), then one GET is
// timed from send to the full (tiny) response. Each iteration is one
// resume: claim a worker, restore, wakeup probe, proxy.
func BenchmarkActivationSuspended(b *testing.B) {
	in := startUp(b, 2, "--demo")
	in.waitTemplateReady("counter")
	benchActivation(b, in, "counter-1", func() {
		k := in.standbysPrepared()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := in.client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: "counter-1"}); err != nil {
			b.Fatal(err)
		}
		in.waitStandbys(k + 1)
	})
}

// BenchmarkActivationGolden measures a new actor's first request: restore
// from the template's golden snapshot.
func BenchmarkActivationGolden(b *testing.B) {
	in := startUp(b, 2, "--demo")
	in.waitTemplateReady("counter")
	i := 0
	var name string
	benchActivation(b, in, "", func() {
		if name != "" {
			k := in.standbysPrepared()
			in.ate("suspend", "actor", name)
			in.waitStandbys(k + 1)
			in.ate("delete", "actor", name)
		}
		i++
		name = "golden-" + strconv.Itoa(i)
		in.ate("create", "actor", name, "--template", "counter")
	}, func() string { return name })
}

// BenchmarkActivationPaused measures activation of an actor paused on the
// node (checkpoint on the node's disk) through the router.
func BenchmarkActivationPaused(b *testing.B) {
	in := startUp(b, 2, "--demo")
	in.waitTemplateReady("counter")
	benchActivation(b, in, "counter-1", func() {
		k := in.standbysPrepared()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := in.client.PauseActor(ctx, &atev1.PauseActorRequest{Atespace: "default", Name: "counter-1"}); err != nil {
			b.Fatal(err)
		}
		in.waitStandbys(k + 1)
	})
}

// BenchmarkActivationColdBoot measures a cold boot through the router: the
// durable-data template suspends with scope Data, so every resume boots
// the image (with its volume restored) instead of restoring memory.
func BenchmarkActivationColdBoot(b *testing.B) {
	in := startUp(b, 2)
	in.createTemplate("test/e2e/testdata/durable-data.yaml", "durable-data")
	in.ate("create", "actor", "cold", "--template", "durable-data")
	benchActivation(b, in, "cold", func() {
		k := in.standbysPrepared()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := in.client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: "cold"}); err != nil {
			b.Fatal(err)
		}
		in.waitStandbys(k + 1)
	})
}

// BenchmarkWarm measures a request to a RUNNING actor through the router.
func BenchmarkWarm(b *testing.B) {
	in := startUp(b, 2, "--demo")
	in.waitTemplateReady("counter")
	in.mustCount("default/counter-1", 1)
	benchActivation(b, in, "counter-1", func() {})
}

// benchActivation times one GET per iteration after an untimed prepare.
// name, or names()[0] when name is empty, selects the actor.
func benchActivation(b *testing.B, in *installation, name string, prepare func(), names ...func() string) {
	if name != "" {
		// Untimed: the actor runs before the first prepare.
		if code, body, _, err := in.request(http.MethodGet, "default/"+name, "/", ""); err != nil || code != http.StatusOK {
			b.Fatalf("warm-up GET = %d %q %v", code, body, err)
		}
	}
	var lat []time.Duration
	for b.Loop() {
		b.StopTimer()
		prepare()
		actor := name
		if actor == "" {
			actor = names[0]()
		}
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
