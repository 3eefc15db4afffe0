package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/snapshot"
)

// notesOf GETs the actor's notes and returns their texts in order.
func (in *installation) notesOf(actor string) []string {
	in.t.Helper()
	code, body := in.get(actor, "/notes")
	if code != http.StatusOK {
		in.t.Fatalf("GET %s /notes = %d %q", actor, code, body)
	}
	var notes []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal([]byte(body), &notes); err != nil {
		in.t.Fatalf("GET %s /notes body %q: %v", actor, body, err)
	}
	var out []string
	for _, n := range notes {
		out = append(out, n.Text)
	}
	return out
}

// TestTemplateMove: an actor of python-notes keeping its notes in a
// durable volume moves to a new version of its template (a second
// template from the same image, identical volumes): the notes are still
// there, the memo it held only in memory is gone. A move while RUNNING,
// and one to a template whose volumes differ, are refused, and the
// rollout helper moves the suspended actors of the old template and
// names the running one it skipped.
func TestTemplateMove(t *testing.T) {
	in := startUp(t, 2)
	for _, name := range []string{"notes-v1", "notes-v2", "notes-othervol"} {
		in.createTemplate("test/e2e/testdata/"+name+".yaml", name)
	}
	in.ate("create", "actor", "notes-1", "--template", "notes-v1")
	for _, text := range []string{"buy milk", "call alice"} {
		if code, body := in.do(http.MethodPost, "default/notes-1", "/notes", text); code != http.StatusCreated {
			t.Fatalf("POST /notes = %d %q", code, body)
		}
	}
	if code, body := in.do(http.MethodPut, "default/notes-1", "/memo", "only in memory"); code != http.StatusNoContent {
		t.Fatalf("PUT /memo = %d %q", code, body)
	}

	out, err := in.ateErr("update", "actor", "notes-1", "--template", "notes-v2")
	if err == nil || !strings.Contains(out, "is RUNNING: suspend it first") {
		t.Fatalf("move of a RUNNING actor: err %v, output %q; want a refusal saying to suspend first", err, out)
	}
	in.suspend("notes-1")
	// The suspend kept memory: a resume on the same template has the memo.
	if code, body := in.get("default/notes-1", "/memo"); code != http.StatusOK || body != "only in memory" {
		t.Fatalf("GET /memo after suspend and resume = %d %q, want the memo", code, body)
	}
	in.suspend("notes-1")

	out, err = in.ateErr("update", "actor", "notes-1", "--template", "notes-othervol")
	if err == nil || !strings.Contains(out, "volumes [data] vs [notes]") {
		t.Fatalf("move to other volumes: err %v, output %q; want a refusal naming the volumes", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = in.client.UpdateActor(ctx, &atev1.UpdateActorRequest{Atespace: "default", Name: "notes-1", Template: "notes-othervol"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("UpdateActor to other volumes = %v, want FailedPrecondition", err)
	}

	out = in.ate("update", "actor", "notes-1", "--template", "notes-v2")
	if !strings.Contains(out, "moved to template notes-v2") {
		t.Fatalf("ate update actor output %q", out)
	}
	if a := in.actor("notes-1"); a.GetTemplate() != "notes-v2" || !a.GetVolumesOnly() || a.GetState() != atev1.ActorState_SUSPENDED {
		t.Fatalf("after the move: template %s volumesOnly %v state %s", a.GetTemplate(), a.GetVolumesOnly(), a.GetState())
	}
	// The old template is free of actors now.
	in.ate("delete", "template", "notes-othervol")

	if got := in.notesOf("default/notes-1"); strings.Join(got, "|") != "buy milk|call alice" {
		t.Fatalf("notes after the move = %q, want both", got)
	}
	if code, body := in.get("default/notes-1", "/memo"); code != http.StatusOK || body != "" {
		t.Fatalf("GET /memo after the move = %d %q, want it empty: memory does not move", code, body)
	}
	tpl, err := in.client.GetActorTemplate(ctx, &atev1.GetActorTemplateRequest{Atespace: "default", Name: "notes-v2"})
	if err != nil {
		t.Fatal(err)
	}
	// It restored notes-v2's golden snapshot, not a cold boot.
	if a := in.actor("notes-1"); a.GetState() != atev1.ActorState_RUNNING ||
		!strings.Contains(a.GetMessage(), "memory from "+tpl.GetStatus().GetGoldenSnapshot()) {
		t.Fatalf("after the first request on notes-v2: state %s, message %q; want RUNNING from %s's golden snapshot",
			a.GetState(), a.GetMessage(), tpl.GetName())
	}
	// A suspend on notes-v2 makes the snapshot whole again: memory is kept.
	if code, body := in.do(http.MethodPut, "default/notes-1", "/memo", "v2 memo"); code != http.StatusNoContent {
		t.Fatalf("PUT /memo = %d %q", code, body)
	}
	in.suspend("notes-1")
	if a := in.actor("notes-1"); a.GetVolumesOnly() {
		t.Fatal("volumesOnly still set after a suspend on the new template")
	}
	if code, body := in.get("default/notes-1", "/memo"); body != "v2 memo" {
		t.Fatalf("GET /memo after a suspend on notes-v2 = %d %q, want the memo", code, body)
	}

	// Rollout: notes-2 (SUSPENDED) moves, notes-3 (RUNNING) is skipped.
	for _, name := range []string{"notes-2", "notes-3"} {
		in.ate("create", "actor", name, "--template", "notes-v1")
		if code, body := in.do(http.MethodPost, "default/"+name, "/notes", "note of "+name); code != http.StatusCreated {
			t.Fatalf("POST %s /notes = %d %q", name, code, body)
		}
	}
	in.suspend("notes-2")
	out = in.ate("update", "actors", "--from-template", "notes-v1", "--template", "notes-v2")
	if !strings.Contains(out, "moved default/notes-2 to notes-v2") || !strings.Contains(out, "skipped default/notes-3: ") ||
		!strings.Contains(out, "is RUNNING: suspend it first") || !strings.Contains(out, "1 moved to notes-v2, 1 skipped") {
		t.Fatalf("rollout output:\n%s", out)
	}
	if got := in.notesOf("default/notes-2"); strings.Join(got, "|") != "note of notes-2" {
		t.Fatalf("notes of notes-2 after the rollout = %q", got)
	}
	if a := in.actor("notes-3"); a.GetTemplate() != "notes-v1" {
		t.Fatalf("skipped notes-3 moved to %s", a.GetTemplate())
	}
}

// TestTemplateMoveSelector: the rollout by label selector moves exactly
// the suspended actors whose labels match (their notes kept) and leaves an
// unlabelled one of the same template untouched; a fork keeps the labels
// it was created with.
func TestTemplateMoveSelector(t *testing.T) {
	in := startUp(t, 2)
	for _, name := range []string{"notes-v1", "notes-v2"} {
		in.createTemplate("test/e2e/testdata/"+name+".yaml", name)
	}
	in.ate("create", "actor", "web-1", "--template", "notes-v1", "-l", "app=notes", "-l", "track=stable")
	in.ate("create", "actor", "web-2", "--template", "notes-v1", "--labels", "app=notes,track=canary")
	in.ate("create", "actor", "plain-1", "--template", "notes-v1")
	for _, name := range []string{"web-1", "web-2", "plain-1"} {
		if code, body := in.do(http.MethodPost, "default/"+name, "/notes", "note of "+name); code != http.StatusCreated {
			t.Fatalf("POST %s /notes = %d %q", name, code, body)
		}
		in.suspend(name)
	}
	plain := in.actor("plain-1")

	out := in.ate("get", "actors", "-l", "app=notes", "--show-labels")
	if !strings.Contains(out, "app=notes,track=stable") || !strings.Contains(out, "app=notes,track=canary") || strings.Contains(out, "plain-1") {
		t.Fatalf("ate get actors -l app=notes:\n%s", out)
	}
	out, err := in.ateErr("update", "actors", "--selector", "app in (notes", "--template", "notes-v2")
	if err == nil || !strings.Contains(out, "label_selector") {
		t.Fatalf("rollout with a bad selector: err %v, output %q; want INVALID_ARGUMENT", err, out)
	}

	out = in.ate("update", "actors", "--selector", "app=notes", "--template", "notes-v2")
	if !strings.Contains(out, "moved default/web-1 to notes-v2") || !strings.Contains(out, "moved default/web-2 to notes-v2") ||
		!strings.Contains(out, "2 moved to notes-v2, 0 skipped") || strings.Contains(out, "plain-1") {
		t.Fatalf("selector rollout output:\n%s", out)
	}
	for _, name := range []string{"web-1", "web-2"} {
		if a := in.actor(name); a.GetTemplate() != "notes-v2" || !a.GetVolumesOnly() || a.GetLabels()["app"] != "notes" {
			t.Fatalf("%s after the rollout: template %s volumesOnly %v labels %v", name, a.GetTemplate(), a.GetVolumesOnly(), a.GetLabels())
		}
	}
	// The router reports plain-1's request as activity on its own
	// schedule, which can land after the suspend and bump the version;
	// every other field must be what it was before the rollout.
	if a := in.actor("plain-1"); a.GetTemplate() != "notes-v1" || a.GetVolumesOnly() || !proto.Equal(withoutActivity(a), withoutActivity(plain)) {
		t.Fatalf("plain-1 after the rollout:\n%v\nbefore:\n%v\nwant it untouched", a, plain)
	}
	if got := in.notesOf("default/web-1"); strings.Join(got, "|") != "note of web-1" {
		t.Fatalf("notes of web-1 after the rollout = %q", got)
	}

	in.ate("create", "actor", "fork-1", "--from-actor", "plain-1", "-l", "app=fork")
	if a := in.actor("fork-1"); a.GetLabels()["app"] != "fork" || len(a.GetLabels()) != 1 {
		t.Fatalf("fork-1's labels = %v, want app=fork", a.GetLabels())
	}
}

// withoutActivity is a copy of a without what the router's activity
// reports write (last_activity, and the version that write bumps).
func withoutActivity(a *atev1.Actor) *atev1.Actor {
	c := proto.Clone(a).(*atev1.Actor)
	c.LastActivity, c.Version = nil, 0
	return c
}

// TestExpiry: with a 2 s ttl, a suspended actor nobody uses is deleted
// with its snapshot files by the API server's sweep, and logged; an
// actor used within the ttl all along stays.
func TestExpiry(t *testing.T) {
	in := startUp(t, 2, "--expiry-interval", "200ms")
	in.counterTemplate("ttl", nil, "ttl: {deleteAfterIdle: 2s}\n")
	for _, name := range []string{"idle-1", "used-1"} {
		in.ate("create", "actor", name, "--template", "ttl")
		in.mustCount("default/"+name, 1)
		in.suspend(name)
	}
	idle := in.actor("idle-1")
	snapDir := filepath.Join(in.dataDir, "snapshots", idle.GetUid())
	if _, err := os.Stat(filepath.Join(snapDir, strings.TrimPrefix(snapshot.Bare(idle.GetSnapshot()), idle.GetUid()+"/"))); err != nil {
		t.Fatalf("idle-1's snapshot %s: %v", idle.GetSnapshot(), err)
	}
	lastUse := time.Now()
	uses := 0
	waitFor(t, "idle-1 expired", time.Minute, func() bool {
		// used-1 is used (resumed by a request, suspended again) every
		// second, well within its ttl, and is SUSPENDED in between.
		if time.Since(lastUse) > time.Second {
			in.get("default/used-1", "/")
			in.suspend("used-1")
			lastUse, uses = time.Now(), uses+1
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := in.client.GetActor(ctx, &atev1.GetActorRequest{Atespace: "default", Name: "idle-1"})
		if err != nil && status.Code(err) != codes.NotFound {
			t.Fatalf("GetActor idle-1: %v", err)
		}
		return status.Code(err) == codes.NotFound
	})
	if uses == 0 {
		t.Fatal("idle-1 expired before used-1 was used at all: the test proved nothing about used-1")
	}
	// The sweep deletes the record first and the snapshots after it (a
	// failure in between leaves only unreferenced files, which garbage
	// collection takes), so NotFound can come a moment before the files go.
	waitFor(t, "idle-1's snapshot directory "+snapDir+" gone after expiry", 10*time.Second, func() bool {
		_, err := os.Stat(snapDir)
		return errors.Is(err, fs.ErrNotExist)
	})
	if a := in.actor("used-1"); a.GetState() != atev1.ActorState_SUSPENDED {
		t.Fatalf("used-1 is %s, want SUSPENDED (exposed to the sweep)", a.GetState())
	}
	// The sweep logs after the delete commits, so a reader can see
	// NotFound a moment before the line reaches the log.
	var recs []map[string]any
	waitFor(t, "an \"actor expired\" log record", 10*time.Second, func() bool {
		recs = in.logRecords("actor expired")
		return len(recs) > 0
	})
	if len(recs) != 1 || loggedActor(recs[0]) != "idle-1" || recs[0]["template"] != "ttl" || recs[0]["idleFor"] == nil {
		t.Fatalf("\"actor expired\" records = %v, want one for idle-1 of template ttl with idleFor", recs)
	}
	if out := in.ate("get", "actors", "--expired"); strings.Contains(out, "used-1") {
		t.Fatalf("ate get actors --expired lists used-1:\n%s", out)
	}
	if n := sample(t, in.scrape(), "ate_lifecycle_actors_expired_total", nil); n != 1 {
		t.Fatalf("ate_lifecycle_actors_expired_total = %v, want 1", n)
	}
}
