package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// testPython: the Python example, pulled from the registry by digest,
// holding 64 MB of live state (STATE_MB: a ballast of random strings)
// and a memo in memory only. Both come back after a suspend, through the
// router Service; then its activations are timed (BENCHMARKS.md), and it
// is deleted so the stories after it have the workers to themselves.
func testPython(t *testing.T, ctx context.Context, in *install, dir string) {
	yaml := fmt.Sprintf(`name: python-notes
containers:
- name: notes
  image: %s
  command: ["/usr/bin/python3", "/app/notes.py"]
  ports: [8080]
  env: {STATE_MB: "64"}
wakeupProbe:
  httpGet: {path: /healthz, port: 8080}
newActors: golden
idle: {after: 10m, action: suspend}
`, kc.images["python-notes"])
	if err := writeAndCreateTemplate(ctx, in, dir, "python-notes", yaml); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ate(ctx, "create", "actor", "notes-1", "--template", "python-notes"); err != nil {
		t.Fatal(err)
	}
	const actor = "default/notes-1"
	type sum struct {
		MB     int    `json:"mb"`
		SHA256 string `json:"sha256"`
	}
	checksum := func() sum {
		t.Helper()
		var s sum
		body := call(t, ctx, actor, http.MethodGet, "/checksum", "", http.StatusOK)
		if err := json.Unmarshal([]byte(body), &s); err != nil || s.MB != 64 || s.SHA256 == "" {
			t.Fatalf("GET /checksum: %q (%v), want 64 MB of ballast", body, err)
		}
		return s
	}
	before := checksum()
	call(t, ctx, actor, http.MethodPut, "/memo", "kept in memory only", http.StatusNoContent)
	if _, err := in.ate(ctx, "suspend", "actor", "notes-1"); err != nil {
		t.Fatal(err)
	}
	if st, err := in.actorState(ctx, actor); err != nil || st != "SUSPENDED" {
		t.Fatalf("%s after suspend: %q %v, want SUSPENDED", actor, st, err)
	}
	if got := call(t, ctx, actor, http.MethodGet, "/memo", "", http.StatusOK); got != "kept in memory only" {
		t.Fatalf("memo after suspend and resume: %q", got)
	}
	if after := checksum(); after != before {
		t.Fatalf("ballast after suspend and resume: %+v, was %+v", after, before)
	}
	in.activations(t, ctx, "python-notes, 64 MB of live state", actor, "/healthz", 20)
	if _, err := in.ate(ctx, "delete", "actor", "notes-1", "--force"); err != nil {
		t.Fatal(err)
	}
}

// call sends method path (with body, if any) to actor through the router
// Service and returns the response body, failing unless the status is
// want.
func call(t *testing.T, ctx context.Context, actor, method, path, body string, want int) string {
	t.Helper()
	u, err := routerURL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, method, u+strings.TrimPrefix(path, "/"), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("ate-target-actor", actor)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, actor, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != want {
		t.Fatalf("%s %s on %s: %s %q %v, want %d", method, path, actor, resp.Status, b, err, want)
	}
	return strings.TrimSpace(string(b))
}
