package up_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/bench"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeagent"
	"substrate.dev/ate/internal/testwait"
	"substrate.dev/ate/internal/up"
)

// TestEmbeddedNodeUnderRegistryRules: `ate up`'s in-process node is a
// node of the registry like any other. ListNodes shows its heartbeats;
// when it falls silent (everything it sends held, as for a node that
// stood still or was cut off) past the loss deadline it is LOST, the
// actor it ran goes CRASHED at its last snapshot and its workers leave
// the pool; when it speaks again it registers anew, READY with its
// workers, and the sandbox it still held for that actor is stopped (the
// store gives it to nobody), so the actor resumes in one place only.
func TestEmbeddedNodeUnderRegistryRules(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, err := bench.Start(ctx, bench.Config{Dir: dir, Workers: 2, Heartbeat: 20 * time.Millisecond, LostAfter: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	img, err := bench.PackImage(ctx, filepath.Join(t.TempDir(), "img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.CreateTemplate(ctx, c.Client, "counter", img); err != nil {
		t.Fatal(err)
	}
	self := func() *atev1.Node {
		t.Helper()
		resp, err := c.Client.ListNodes(ctx, &atev1.ListNodesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetNodes()) != 1 || resp.GetNodes()[0].GetName() != up.DefaultNodeName {
			t.Fatalf("nodes: %v, want the one node %s", resp.GetNodes(), up.DefaultNodeName)
		}
		return resp.GetNodes()[0]
	}
	first := self()
	if first.GetPhase() != atev1.Node_READY || first.GetWorkers() != 2 || first.GetAddress() != nodeagent.InProcessAddress {
		t.Fatalf("node at start: %v, want READY with 2 workers at %s", first, nodeagent.InProcessAddress)
	}
	testwait.Until(t, "a later heartbeat in ListNodes", func() bool {
		return self().GetLastHeartbeat().AsTime().After(first.GetLastHeartbeat().AsTime())
	})

	if _, err := c.Client.CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{
		Atespace: names.DefaultAtespace, Name: "a", Template: "counter"}}); err != nil {
		t.Fatal(err)
	}
	get := func() *atev1.Actor {
		t.Helper()
		a, err := c.Client.GetActor(ctx, &atev1.GetActorRequest{Atespace: names.DefaultAtespace, Name: "a"})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	resume := func() {
		t.Helper()
		if _, err := c.Client.ResumeActor(ctx, &atev1.ResumeActorRequest{Atespace: names.DefaultAtespace, Name: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	resume()
	if a := get(); a.GetState() != atev1.ActorState_RUNNING {
		t.Fatalf("actor after resume: %v, want RUNNING", a)
	}
	heldBefore := c.Runtime.Len()

	c.PartitionNode(true)
	testwait.Until(t, "the silent node LOST, its workers unregistered", func() bool {
		ws, err := c.Store.ListWorkers(ctx)
		return self().GetPhase() == atev1.Node_LOST && err == nil && len(ws) == 0
	})
	// Its actor went CRASHED before its worker left the pool.
	if a := get(); a.GetState() != atev1.ActorState_CRASHED || a.GetWorker() != "" {
		t.Fatalf("actor on the lost node: %v, want CRASHED without a worker", a)
	}
	// The node never stopped: its sandbox for the actor still runs.
	if got := c.Runtime.Len(); got != heldBefore {
		t.Fatalf("sandboxes while partitioned: %d, want the %d held before", got, heldBefore)
	}

	c.PartitionNode(false)
	testwait.Until(t, "the node READY again with its workers", func() bool {
		n := self()
		return n.GetPhase() == atev1.Node_READY && n.GetWorkers() == 2
	})
	testwait.Until(t, "the stale sandbox stopped", func() bool { return c.Runtime.Len() < heldBefore })
	resume()
	if a := get(); a.GetState() != atev1.ActorState_RUNNING {
		t.Fatalf("actor resumed after the node came back: %v, want RUNNING", a)
	}
}

// TestStandbyReadyReachesRegistryAtOnce: a standby becoming ready on a
// node reaches the registry with a heartbeat sent at once, not at the
// next interval (an hour here), so the resume that follows a suspend
// prefers the worker holding it (lifecycle's claim reads the registry's
// view: nodeagent.Remote.StandbyWorkers).
func TestStandbyReadyReachesRegistryAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := bench.Start(ctx, bench.Config{Dir: t.TempDir(), Workers: 1, Heartbeat: time.Hour, LostAfter: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	img, err := bench.PackImage(ctx, filepath.Join(t.TempDir(), "img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.CreateTemplate(ctx, c.Client, "counter", img); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{
		Atespace: names.DefaultAtespace, Name: "a", Template: "counter"}}); err != nil {
		t.Fatal(err)
	}
	key := &atev1.ResumeActorRequest{Atespace: names.DefaultAtespace, Name: "a"}
	if _, err := c.Client.ResumeActor(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: names.DefaultAtespace, Name: "a"}); err != nil {
		t.Fatal(err)
	}
	tpl, err := c.Store.GetTemplate(ctx, names.DefaultAtespace, "counter")
	if err != nil {
		t.Fatal(err)
	}
	n, ok := c.Registry.Get(up.DefaultNodeName)
	if !ok {
		t.Fatal("the in-process node is not live in the registry")
	}
	testwait.Until(t, "the freed worker's standby known to the registry", func() bool {
		return len(n.StandbyWorkers(tpl.Spec, tpl.ImageDigest)) == 1
	})
}
