package e2e

import (
	"encoding/json"
	"net/http"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestPythonStateSurvivesCheckpoints: python-notes holding 64 MiB of live
// state answers the same /checksum through the router after a suspend and
// resume and after a pause and resume, each a real restore (the resume
// count grows, the state passes through SUSPENDED and PAUSED).
func TestPythonStateSurvivesCheckpoints(t *testing.T) {
	in := startUp(t, 2)
	in.createTemplate("test/e2e/testdata/python-64mb.yaml", "python-64mb")
	in.ate("create", "actor", "big", "--template", "python-64mb")
	want := in.checksum("big", 64)
	resumes := in.actor("big").GetResumes()
	for _, step := range []struct {
		name     string
		put      func(string)
		putState atev1.ActorState
	}{
		{"suspend", in.suspend, atev1.ActorState_SUSPENDED},
		{"pause", in.pause, atev1.ActorState_PAUSED},
	} {
		step.put("big")
		if s := in.state("big"); s != step.putState {
			t.Fatalf("after %s: state %s, want %s", step.name, s, step.putState)
		}
		if got := in.checksum("big", 64); got != want {
			t.Fatalf("after %s and resume: /checksum = %s, want %s", step.name, got, want)
		}
		resumes++
		if got := in.actor("big").GetResumes(); got != resumes {
			t.Fatalf("after %s and resume: resumes = %d, want %d (the request must restore)", step.name, got, resumes)
		}
	}
}

// TestNodeSessions runs the Node.js example: sessions created before a
// suspend are all there after it, their hit counters carrying on; the
// first request after the suspend is a POST that resumes the actor; a
// pause keeps them too.
func TestNodeSessions(t *testing.T) {
	in := startUp(t, 2)
	in.createTemplate("examples/node-sessions/template.yaml", "node-sessions")
	in.ate("create", "actor", "web", "--template", "node-sessions")
	const actor = "default/web"
	post := func(session, item string) {
		t.Helper()
		if code, body := in.do(http.MethodPost, actor, "/sessions/"+session+"/items", item); code != http.StatusCreated {
			t.Fatalf("POST /sessions/%s/items = %d %q", session, code, body)
		}
	}
	type session struct {
		ID    string   `json:"id"`
		Hits  int      `json:"hits"`
		Items []string `json:"items"`
	}
	wantSession := func(id string, hits int, items ...string) {
		t.Helper()
		code, body := in.get(actor, "/sessions/"+id)
		var s session
		if code != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil {
			t.Fatalf("GET /sessions/%s = %d %q", id, code, body)
		}
		if s.ID != id || s.Hits != hits || len(s.Items) != len(items) {
			t.Fatalf("GET /sessions/%s = %q, want %d hits and items %q", id, body, hits, items)
		}
		for i := range items {
			if s.Items[i] != items[i] {
				t.Fatalf("GET /sessions/%s item %d = %q, want %q", id, i, s.Items[i], items[i])
			}
		}
	}

	post("alice", "cart: 1 book")
	post("alice", "cart: 2 pens")
	post("bob", "draft: hello")
	wantSession("alice", 1, "cart: 1 book", "cart: 2 pens")
	wantSession("bob", 1, "draft: hello")

	in.suspend("web")
	if s := in.state("web"); s != atev1.ActorState_SUSPENDED {
		t.Fatalf("state after suspend = %s", s)
	}
	// A POST wakes it: the router resends the body once the actor runs.
	post("bob", "draft: hello again")
	wantSession("alice", 2, "cart: 1 book", "cart: 2 pens")
	wantSession("bob", 2, "draft: hello", "draft: hello again")

	in.pause("web")
	if s := in.state("web"); s != atev1.ActorState_PAUSED {
		t.Fatalf("state after pause = %s", s)
	}
	wantSession("alice", 3, "cart: 1 book", "cart: 2 pens")
	if code, body := in.get(actor, "/sessions/carol"); code != http.StatusNotFound {
		t.Fatalf("GET /sessions/carol = %d %q, want 404", code, body)
	}
	if got := in.actor("web").GetResumes(); got != 3 {
		t.Fatalf("resumes = %d, want 3 (golden, after suspend, after pause)", got)
	}
}
