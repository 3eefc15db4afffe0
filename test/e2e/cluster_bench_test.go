package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/latency"
)

// BenchmarkClusterActivation measures activation through `ate router`
// with the components as separate processes (two nodes of one worker,
// the S3 snapshot store on a loopback SeaweedFS), each iteration one GET
// timed from send to the full response after an untimed put-away:
//
//   - suspended-same-node: suspended and resumed on the same node, whose
//     snapshot cache holds the snapshot (no S3 read);
//   - suspended-other-node: resumed on the other node, which downloads
//     and verifies the snapshot from S3 first;
//   - paused-same-node: paused on the node's disk and resumed there.
//
// Placement is pinned with the actor's worker selector (node=<name>);
// every put-away waits for the freed worker's standby, as an actor idle
// for minutes finds it.
func BenchmarkClusterActivation(b *testing.B) {
	c := startCluster(b, "node-a", "node-b")
	c.in.createTemplate("examples/counter/template.yaml", "counter")
	c.in.ate("create", "actor", "bench", "--template", "counter")
	pin := func(node string) {
		b.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.in.client.UpdateActor(ctx, &atev1.UpdateActorRequest{Atespace: "default", Name: "bench",
			WorkerSelector: map[string]string{"node": node}}); err != nil {
			b.Fatal(err)
		}
	}
	// putAway checkpoints the actor and waits for its node's standby.
	putAway := func(how func(string)) {
		b.Helper()
		node := c.nodeOf("bench")
		want := c.nodes[node].records("standby prepared") + 1
		how("bench")
		waitFor(b, "standby on "+node, 30*time.Second, func() bool { return c.nodes[node].records("standby prepared") >= want })
	}
	at := "node-a" // where the actor is pinned
	pin(at)
	c.in.mustCount("default/bench", 1)
	for _, bc := range []struct {
		name    string
		prepare func()
	}{
		{"suspended-same-node", func() { putAway(c.in.suspend) }},
		{"suspended-other-node", func() {
			putAway(c.in.suspend)
			at = other(at)
			pin(at)
		}},
		{"paused-same-node", func() { putAway(c.in.pause) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				b.StopTimer()
				bc.prepare()
				b.StartTimer()
				start := time.Now()
				code, body, _, err := c.in.request(http.MethodGet, "default/bench", "/", "")
				lat = append(lat, time.Since(start))
				if err != nil || code != http.StatusOK {
					b.Fatalf("GET = %d %q %v", code, body, err)
				}
				if got := c.nodeOf("bench"); got != at {
					b.Fatalf("resumed on %q, want %s", got, at)
				}
			}
			latency.Report(b, "", lat, 0.50, 0.95, 0.99)
			b.ReportMetric(0, "ns/op")
		})
	}
}
