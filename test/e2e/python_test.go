package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestPythonNotes runs a real interpreter: POST three notes, suspend, a
// POST resumes the actor, and a GET finds all four notes in memory.
func TestPythonNotes(t *testing.T) {
	in := startUp(t, 2)
	in.createTemplate("examples/python-notes/template.yaml", "python-notes")
	in.ate("create", "actor", "notes-1", "--template", "python-notes")
	texts := []string{"buy milk", "call alice", "ship v1"}
	for _, text := range texts {
		if code, body := in.do(http.MethodPost, "default/notes-1", "/notes", text); code != http.StatusCreated {
			t.Fatalf("POST /notes = %d %q", code, body)
		}
	}
	in.ate("suspend", "actor", "notes-1")
	if s := in.actor("notes-1").GetState().String(); s != "SUSPENDED" {
		t.Fatalf("state after suspend = %s", s)
	}
	// The first request after the suspend is a POST: the router's cached
	// target is stale (421), and the request, which the actor never saw,
	// is sent again with its body once the actor is resumed.
	texts = append(texts, "after suspend")
	if code, body := in.do(http.MethodPost, "default/notes-1", "/notes", texts[3]); code != http.StatusCreated {
		t.Fatalf("POST /notes after suspend = %d %q", code, body)
	}
	code, body := in.get("default/notes-1", "/notes")
	if code != http.StatusOK {
		t.Fatalf("GET /notes = %d %q", code, body)
	}
	var notes []struct {
		ID   int    `json:"id"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal([]byte(body), &notes); err != nil {
		t.Fatalf("GET /notes body %q: %v", body, err)
	}
	if len(notes) != len(texts) {
		t.Fatalf("got %d notes after resume, want %d: %q", len(notes), len(texts), body)
	}
	for i, n := range notes {
		if n.Text != texts[i] {
			t.Fatalf("note %d = %q, want %q", i, n.Text, texts[i])
		}
	}
	if in.actor("notes-1").GetResumes() != 2 {
		t.Fatalf("resumes = %d, want 2 (first boot from golden, then after suspend)", in.actor("notes-1").GetResumes())
	}
}
