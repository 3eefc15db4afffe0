package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// wantCode calls err's RPC result and fails unless it has code.
func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: got %v, want %s", what, err, code)
	}
}

// checkIdentity reads the actor's identity files and checks they name it.
func (in *installation) checkIdentity(name string) {
	in.t.Helper()
	in.cat("default/"+name, "/run/ate/actor-name", name)
	in.cat("default/"+name, "/run/ate/actor-uid", in.actor(name).GetUid())
}

// TestForkFromTag: a counter at count 5 is tagged while it runs (it keeps
// running and counting); two actors created from the tag each count 6,
// 7… on their own, each reads its own identity and starts with the
// source's volume, which each then changes alone; deleting the source and
// then the tag leaves the forks working across suspends. A fork straight
// from a RUNNING actor (--from-actor) and a tag of a SUSPENDED one start
// where their source was. Duplicate and missing tags get their codes.
func TestForkFromTag(t *testing.T) {
	in := startUp(t, 3)
	in.createTemplate("test/e2e/testdata/durable.yaml", "durable")
	in.ate("create", "actor", "src", "--template", "durable")
	for i := 1; i <= 5; i++ {
		in.mustCount("default/src", i)
	}
	in.put("default/src", "/data/note", "from src")

	out := in.ate("tag", "actor", "src", "five")
	if !strings.Contains(out, "tag default/five of actor default/src created") {
		t.Fatalf("ate tag: %q", out)
	}
	in.wantState("src", atev1.ActorState_RUNNING)
	in.mustCount("default/src", 6) // the tag did not stop it

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := in.client.TagActor(ctx, &atev1.TagActorRequest{Atespace: "default", Actor: "src", Tag: "five"})
	wantCode(t, "a second tag named five", err, codes.AlreadyExists)
	_, err = in.client.CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{Atespace: "default", Name: "x"}, FromTag: "nope"})
	wantCode(t, "create from a missing tag", err, codes.NotFound)
	_, err = in.client.TagActor(ctx, &atev1.TagActorRequest{Atespace: "default", Actor: "src", Tag: "Bad_Name"})
	wantCode(t, "a bad tag name", err, codes.InvalidArgument)

	in.ate("create", "actor", "fork-a", "--from-tag", "five")
	in.ate("create", "actor", "fork-b", "--from-tag", "five")
	if a, b := in.actor("fork-a"), in.actor("fork-b"); a.GetUid() == b.GetUid() || a.GetTemplate() != "durable" || a.GetState() != atev1.ActorState_SUSPENDED {
		t.Fatalf("forks: a %s %s %s, b %s", a.GetUid(), a.GetTemplate(), a.GetState(), b.GetUid())
	}
	in.mustCount("default/fork-a", 6)
	in.mustCount("default/fork-a", 7)
	in.mustCount("default/fork-b", 6)
	in.mustCount("default/fork-a", 8)
	in.mustCount("default/fork-b", 7)
	in.mustCount("default/src", 7)
	for _, n := range []string{"fork-a", "fork-b", "src"} {
		in.checkIdentity(n)
		in.cat("default/"+n, "/data/note", "from src")
	}
	in.put("default/fork-a", "/data/note", "a's own")
	in.cat("default/fork-b", "/data/note", "from src")

	// --from-actor of a RUNNING actor: its state now, and it runs on.
	in.ate("create", "actor", "fork-c", "--from-actor", "src")
	in.wantState("src", atev1.ActorState_RUNNING)
	in.mustCount("default/src", 8)
	in.mustCount("default/fork-c", 8)
	in.checkIdentity("fork-c")

	// A tag of a SUSPENDED actor copies its snapshot.
	in.ate("suspend", "actor", "src")
	in.ate("tag", "actor", "src", "suspended")
	in.ate("create", "actor", "fork-d", "--from-tag", "suspended")
	in.mustCount("default/fork-d", 9)
	in.checkIdentity("fork-d")

	out = in.ate("get", "tags")
	for _, want := range []string{"default/five", "default/suspended", "src", "durable"} {
		if !strings.Contains(out, want) {
			t.Fatalf("ate get tags lacks %q:\n%s", want, out)
		}
	}

	// The source goes, then its tags: the forks keep working, from
	// their own snapshots, across suspends.
	in.ate("delete", "actor", "src")
	in.ate("delete", "tag", "five")
	in.ate("delete", "tag", "suspended")
	_, err = in.client.GetTag(ctx, &atev1.GetTagRequest{Atespace: "default", Name: "five"})
	wantCode(t, "a deleted tag", err, codes.NotFound)
	for _, n := range []string{"fork-a", "fork-b", "fork-c", "fork-d"} {
		in.ate("suspend", "actor", n)
	}
	in.mustCount("default/fork-a", 9)
	in.mustCount("default/fork-b", 8)
	in.mustCount("default/fork-c", 9)
	in.mustCount("default/fork-d", 10)
	in.cat("default/fork-a", "/data/note", "a's own")
	in.cat("default/fork-b", "/data/note", "from src")
	in.checkIdentity("fork-a")
	in.checkIdentity("fork-b")
}

// TestClusterForkAcrossNodes: over the S3 store with separate API
// server, nodes and router, a counter at count 5 is tagged while it runs
// on one node (the node writes the tag's snapshot to S3); that node then
// goes away, and two forks of the tag, each copied server-side in the
// bucket, resume on the other node at 6 with their own identities, and
// keep counting after the source and the tag are deleted.
func TestClusterForkAcrossNodes(t *testing.T) {
	c := startCluster(t, "node-a", "node-b")
	c.counterActor()
	for i := 2; i <= 5; i++ {
		c.in.mustCount("default/counter-1", i)
	}
	first := c.nodeOf("counter-1")
	c.in.ate("tag", "actor", "counter-1", "five")
	c.in.mustCount("default/counter-1", 6) // still running there
	if got := c.nodeOf("counter-1"); got != first {
		t.Fatalf("tagged actor moved from %s to %q", first, got)
	}
	c.in.ate("suspend", "actor", "counter-1")
	c.nodes[first].terminate(60 * time.Second)
	waitFor(t, "node "+first+" gone from the pool", 10*time.Second, func() bool { return c.nodePhase(first) == atev1.Node_LOST })

	c.in.ate("create", "actor", "fork-a", "--from-tag", "five")
	c.in.ate("create", "actor", "fork-b", "--from-tag", "five")
	keys, err := c.s3.Keys(context.Background(), "e2e/"+c.in.actor("fork-a").GetUid()+"/")
	if err != nil || len(keys) == 0 {
		t.Fatalf("no objects of fork-a's snapshot in the bucket (%v)", err)
	}
	c.in.mustCount("default/fork-a", 6)
	if got := c.nodeOf("fork-a"); got != other(first) {
		t.Fatalf("fork-a resumed on %q, want %s", got, other(first))
	}
	c.in.checkIdentity("fork-a")
	c.in.ate("suspend", "actor", "fork-a") // one worker left: make room
	c.in.mustCount("default/fork-b", 6)
	c.in.checkIdentity("fork-b")
	c.in.ate("suspend", "actor", "fork-b")

	c.in.ate("delete", "actor", "counter-1")
	c.in.ate("delete", "tag", "five")
	c.in.mustCount("default/fork-a", 7)
	c.in.ate("suspend", "actor", "fork-a")
	c.in.mustCount("default/fork-b", 7)
}

// TestVolumeLimit: an actor that writes more into its volume than the
// node keeps (--max-volume-bytes) cannot have it tagged or forked: the
// request fails naming the flag, the actor runs on untouched, and once
// the actor shrinks its volume the same tag succeeds.
func TestVolumeLimit(t *testing.T) {
	in := startUp(t, 2, "--max-volume-bytes", "4000000")
	in.createTemplate("test/e2e/testdata/durable.yaml", "durable")
	in.ate("create", "actor", "big", "--template", "durable")
	in.mustCount("default/big", 1)
	// What the actor does inside its sandbox: 5 MB in /data.
	in.put("default/big", "/data/blob", strings.Repeat("x", 5_000_000))
	for _, args := range [][]string{
		{"tag", "actor", "big", "too-big"},
		{"create", "actor", "big-fork", "--from-actor", "big"},
	} {
		out, err := in.ateErr(args...)
		if err == nil || !strings.Contains(out, "--max-volume-bytes 4000000") {
			t.Fatalf("ate %s of a 5 MB volume: %v %q, want a failure naming --max-volume-bytes", strings.Join(args, " "), err, out)
		}
	}
	in.wantState("big", atev1.ActorState_RUNNING)
	in.mustCount("default/big", 2)
	in.put("default/big", "/data/blob", "small now")
	in.ate("tag", "actor", "big", "small")
}
