package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

// BenchmarkParts measures the pieces a wake-up is made of, one at a time,
// to explain BenchmarkWakeups (one op each). A store write, the piece
// left out here, is BenchmarkCeilings' store-write with one writer.
//
//	store-read    one bolt read transaction (GetActor)
//	grpc-get      GetActor through gRPC and the API server: the RPC floor
//	grpc-create   CreateActor through gRPC: one validated, fsync'd insert
//	              (the on-disk creation rate, next to BenchmarkScale's
//	              preload on tmpfs)
//	node-cycle    node.Start restoring the golden snapshot (start-*),
//	              then node.Checkpoint into a new committed snapshot
//	              (checkpoint-*), without store or lifecycle
func BenchmarkParts(b *testing.B) {
	c := startCluster(b, b.TempDir(), 1, fake.Config{})
	defer closeCluster(b, c)
	ctx := context.Background()
	name := createActors(b, c.Client, 1)[0]

	b.Run("store-read", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Store.GetActor(ctx, names.ActorKey{Atespace: names.DefaultAtespace, Name: name}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("grpc-get", func(b *testing.B) {
		req := &atev1.GetActorRequest{Atespace: names.DefaultAtespace, Name: name}
		for b.Loop() {
			if _, err := c.Client.GetActor(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	created := 0
	b.Run("grpc-create", func(b *testing.B) {
		start := time.Now()
		for b.Loop() {
			created++
			_, err := c.Client.CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{
				Atespace: names.DefaultAtespace, Name: fmt.Sprintf("created-%07d", created), Template: templateName}})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "creates/s")
	})
	b.Run("node-cycle", func(b *testing.B) {
		runNodeCycle(b, c)
	})
}

func runNodeCycle(b *testing.B, c *Cluster) {
	ctx := context.Background()
	tpl, err := c.Store.GetTemplate(ctx, names.DefaultAtespace, templateName)
	if err != nil || tpl.Phase != store.TemplateReady {
		b.Fatalf("template: %v (%v)", err, tpl)
	}
	worker := c.Node.Workers()[0].Name
	req := node.StartRequest{Worker: worker, ActorUID: "bench-node-cycle", Atespace: names.DefaultAtespace,
		Name: "node-cycle", Spec: tpl.Spec, Snapshot: tpl.GoldenSnapshot, ImageDigest: tpl.ImageDigest}
	var starts, checkpoints []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := c.Node.Start(ctx, req); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		ref, err := c.Node.Checkpoint(ctx, worker, req.ActorUID, node.CheckpointOptions{Scope: snapshot.ScopeFull})
		if err != nil {
			b.Fatal(err)
		}
		starts, checkpoints = append(starts, t1.Sub(t0)), append(checkpoints, time.Since(t1))
		// The lifecycle deletes the previous snapshot after each suspend.
		if err := c.Snapshots.Delete(context.Background(), ref); err != nil {
			b.Fatal(err)
		}
	}
	reportLatency(b, "start-", starts)
	reportLatency(b, "checkpoint-", checkpoints)
}
