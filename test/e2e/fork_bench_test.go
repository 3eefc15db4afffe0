package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/latency"
)

// BenchmarkForkRunning measures a fork of a RUNNING actor holding 100 MB
// in its volume (ten 10 MB files of random bytes): CreateActor with
// from_actor, which checkpoints the actor without stopping it, copies its
// volume and commits both to the snapshot store (docs/actors.md, Tags and
// fork). What the security round changed on this path is the volume
// copy (by descriptors, never following a link the actor made:
// docs/security.md). Each iteration times the call; the fork is deleted
// untimed.
func BenchmarkForkRunning(b *testing.B) {
	in := startUp(b, 2)
	in.createTemplate("test/e2e/testdata/durable-data.yaml", "durable-data")
	in.ate("create", "actor", "src", "--template", "durable-data")
	in.mustCount("default/src", 1)
	chunk := make([]byte, 10<<20)
	for i := range 10 {
		_, _ = rand.Read(chunk)
		in.put("default/src", fmt.Sprintf("/data/blob%d", i), string(chunk))
	}
	var lat []time.Duration
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("fork-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		start := time.Now()
		_, err := in.client.CreateActor(ctx, &atev1.CreateActorRequest{
			Actor: &atev1.Actor{Atespace: "default", Name: name}, FromActor: "src"})
		d := time.Since(start)
		cancel()
		if err != nil {
			b.Fatalf("fork %d: %v", i, err)
		}
		lat = append(lat, d)
		b.StopTimer()
		in.ate("delete", "actor", name)
		b.StartTimer()
	}
	b.StopTimer()
	latency.Report(b, "", lat, 0.50, 0.95, 0.99)
}
