package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/ateconfig"
)

// TestEvictionKeepsTenantsNamesApart: eviction crosses atespaces, names
// do not. One worker; alice edits atespace default, bob edits team-b.
// Bob resumes his actor through the API, which evicts alice's: nothing
// bob gets back — the response header, the record, events — names her
// actor. Alice's record of the eviction does not name his. The cluster
// admin, who may read both atespaces, still sees whom the eviction was
// for, and whom a resume of theirs evicted. An anonymous client whose
// request through the router evicts alice's actor again learns no name
// from the response.
func TestEvictionKeepsTenantsNamesApart(t *testing.T) {
	dir := t.TempDir()
	const alice, bob = "e2e-alice-token-0123456789", "e2e-bob-token-0123456789"
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(alice+",alice,1\n"+bob+",bob,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("- {name: alice-edits-default, atespace: default, role: editor, users: [alice]}\n"+
		"- {name: bob-edits-b, atespace: team-b, role: editor, users: [bob]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := startUp(t, 1, "--token-auth-file", tokens, "--authorization-policy-file", policy)
	in.counterTemplate("counter", nil, "")
	in.ate("create", "atespace", "team-b")
	tpl := filepath.Join(dir, "counter-b.yaml")
	if err := os.WriteFile(tpl, []byte(fmt.Sprintf("name: counter\ncontainers:\n- name: counter\n  image: oci:%s\n  ports: [8080]\n",
		filepath.Join(repoDir, "build/images/counter"))), 0o600); err != nil {
		t.Fatal(err)
	}
	in.ate("create", "template", "-f", tpl, "-n", "team-b")
	waitFor(t, "template team-b/counter READY", 3*time.Minute, func() bool {
		got, err := in.client.GetActorTemplate(context.Background(), &atev1.GetActorTemplateRequest{Atespace: "team-b", Name: "counter"})
		return err == nil && got.GetStatus().GetPhase() == atev1.ActorTemplateStatus_READY
	})
	// Names that appear nowhere else, so a plain search finds any leak.
	const victim, waiter = "alices-secret-actor", "bobs-secret-actor"
	in.ate("create", "actor", victim, "--template", "counter")
	in.ate("create", "actor", waiter, "--template", "counter", "-n", "team-b")

	// alice's actor takes the one worker.
	if r := in.getReply("default/"+victim, "/"); r.err != nil || r.code != http.StatusOK {
		t.Fatalf("GET %s: %d %q %v", victim, r.code, r.body, r.err)
	}
	asUser := func(tok string) atev1.ControlClient {
		c, err := ateconfig.Load(filepath.Join(in.dataDir, "config.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		c.Token = tok
		conn, err := grpc.NewClient(in.apiAddr, dialOptions(t, c)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return atev1.NewControlClient(conn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	noName := func(who, what, text string, name string) {
		t.Helper()
		if strings.Contains(text, name) {
			t.Errorf("%s sees %s in %s:\n%s", who, name, what, text)
		}
	}

	// bob resumes his actor: the worker is alice's, so it is evicted.
	asBob := asUser(bob)
	var md metadata.MD
	got, err := asBob.ResumeActor(ctx, &atev1.ResumeActorRequest{Atespace: "team-b", Name: waiter}, grpc.Header(&md))
	if err != nil || got.GetState() != atev1.ActorState_RUNNING {
		t.Fatalf("bob's ResumeActor: %v, %v", got, err)
	}
	if a := in.actor(victim); a.GetReason() != atev1.CheckpointReason_EVICTED {
		t.Fatalf("alice's actor: %s reason %s; want evicted for bob's", a.GetState(), a.GetReason())
	}
	// Each value by hand: metadata.MD's String redacts values.
	for k, vs := range md {
		noName("bob", "ResumeActor's header "+k, strings.Join(vs, ","), victim)
	}
	if got := md.Get(atev1.HeaderEvicted); len(got) != 0 {
		t.Errorf("bob's ResumeActor: %s %q, want none", atev1.HeaderEvicted, got)
	}
	noName("bob", "ResumeActor's answer", prototext.Format(got), victim)
	events, err := asBob.ListEvents(ctx, &atev1.ListEventsRequest{Atespace: "team-b"})
	if err != nil {
		t.Fatalf("bob's ListEvents: %v", err)
	}
	noName("bob", "his events", prototext.Format(events), victim)

	// alice sees her actor evicted, not for whom.
	asAlice := asUser(alice)
	mine, err := asAlice.GetActor(ctx, &atev1.GetActorRequest{Atespace: "default", Name: victim})
	if err != nil {
		t.Fatalf("alice's GetActor: %v", err)
	}
	if mine.GetReason() != atev1.CheckpointReason_EVICTED || mine.GetEvictedFor() != "" ||
		!strings.Contains(mine.GetMessage(), "to make room for an actor of another atespace") {
		t.Errorf("alice's record: reason %s evictedFor %q message %q; want EVICTED for an unnamed actor of another atespace",
			mine.GetReason(), mine.GetEvictedFor(), mine.GetMessage())
	}
	noName("alice", "her actor's record", prototext.Format(mine), waiter)
	list, err := asAlice.ListActors(ctx, &atev1.ListActorsRequest{Atespace: "default"})
	if err != nil {
		t.Fatalf("alice's ListActors: %v", err)
	}
	noName("alice", "her actor list", prototext.Format(list), waiter)
	ev, err := asAlice.ListEvents(ctx, &atev1.ListEventsRequest{Atespace: "default"})
	if err != nil {
		t.Fatalf("alice's ListEvents: %v", err)
	}
	noName("alice", "her events", prototext.Format(ev), waiter)
	watch, err := asAlice.WatchEvents(ctx, &atev1.WatchEventsRequest{Atespace: "default"})
	if err != nil {
		t.Fatalf("alice's WatchEvents: %v", err)
	}
	var watched []proto.Message
	for len(watched) < len(ev.GetEvents()) {
		e, err := watch.Recv()
		if err != nil {
			t.Fatalf("alice's WatchEvents: %v", err)
		}
		watched = append(watched, e)
		noName("alice", "her watched events", prototext.Format(e), waiter)
	}

	// The admin may read both: the record says whom it was for, and a
	// resume of alice's actor, which evicts bob's, names it in the header.
	if a := in.actor(victim); a.GetEvictedFor() != "team-b/"+waiter || !strings.Contains(a.GetMessage(), "another atespace") {
		t.Errorf("admin's view of alice's actor: evictedFor %q message %q; want team-b/%s", a.GetEvictedFor(), a.GetMessage(), waiter)
	}
	// ABORTED (the record changed under the resume, as the eviction's
	// last writes land) asks the caller to retry.
	var resumeErr error
	waitFor(t, "the admin's ResumeActor", time.Minute, func() bool {
		md = nil
		_, resumeErr = in.client.ResumeActor(ctx, &atev1.ResumeActorRequest{Atespace: "default", Name: victim}, grpc.Header(&md))
		return status.Code(resumeErr) != codes.Aborted
	})
	if resumeErr != nil {
		t.Fatalf("admin's ResumeActor: %v", resumeErr)
	}
	if got := md.Get(atev1.HeaderEvicted); len(got) != 1 || got[0] != "team-b/"+waiter {
		t.Errorf("admin's ResumeActor: %s %q, want team-b/%s", atev1.HeaderEvicted, got, waiter)
	}

	// An anonymous client wakes bob's actor through the router, which
	// evicts alice's: the answer says an eviction happened, not whose.
	r := in.getReply("team-b/"+waiter, "/")
	if r.err != nil || r.code != http.StatusOK {
		t.Fatalf("anonymous GET %s: %d %q %v", waiter, r.code, r.body, r.err)
	}
	if act := r.header.Get("Ate-Activation"); act != "resumed;evicted" {
		t.Errorf("anonymous GET: Ate-Activation %q, want resumed;evicted", act)
	}
	noName("an anonymous client", "the response", fmt.Sprint(r.header)+r.body, victim)
	noName("an anonymous client", "the response", fmt.Sprint(r.header)+r.body, "default/")
}
