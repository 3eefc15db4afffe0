package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/sandbox/gvisor"
)

// TestRouterErrors: requests that fail below the router — nothing listens
// on the actor's port, the actor's sandbox is killed while it handles the
// request, its snapshot cannot be restored — get the router's answer:
// the actor's name, what to do, and a request id that is also the
// Ate-Request-Id header and is in `ate up`'s log next to the cause; never
// interior addresses, namespace, worker or runtime names, or paths.
func TestRouterErrors(t *testing.T) {
	in := startUp(t, 2)
	// The template's validation (and wakeup probe) want the app to listen
	// on its traffic port when it starts; POST /unlisten makes it stop
	// while its sandbox runs on.
	in.counterTemplate("deaf", map[string]string{"ALLOW_UNLISTEN": "1"}, "")
	// A volume at /data, so slowRequest sees its request arrive.
	in.createTemplate("test/e2e/testdata/durable.yaml", "durable")

	t.Run("port not listening", func(t *testing.T) {
		in.ate("create", "actor", "deaf-1", "--template", "deaf")
		// Only one sandbox may run when the next subtest kills one. The
		// suspend works (only a later resume would fail its probe).
		t.Cleanup(func() {
			// Reported on this subtest, not through in.t (the parent's).
			if _, err := in.client.SuspendActor(context.Background(), &atev1.SuspendActorRequest{Atespace: "default", Name: "deaf-1"}); err != nil {
				t.Errorf("suspend deaf-1: %v", err)
			}
		})
		in.mustCount("default/deaf-1", 1)
		if code, body := in.do(http.MethodPost, "default/deaf-1", "/unlisten", ""); code != http.StatusOK {
			t.Fatalf("POST /unlisten = %d %q", code, body)
		}
		code, body, hdr, err := in.request(http.MethodGet, "default/deaf-1", "/", "")
		if err != nil {
			t.Fatal(err)
		}
		rid := in.assertRouterFailure(t, "deaf-1", code, body, hdr)
		if code != http.StatusBadGateway || !strings.HasPrefix(body, "actor default/deaf-1 is not listening on its port, or has just stopped; check that it listens (") {
			t.Errorf("got %d %q, want 502 saying nothing listens on the actor's port", code, body)
		}
		// The tunnel logs the dial error under the same id.
		in.waitLogRecord(t, rid, "tunnel upstream", "connection refused")
	})

	t.Run("sandbox killed mid-request", func(t *testing.T) {
		in.ate("create", "actor", "victim", "--template", "durable")
		in.mustCount("default/victim", 1)
		worker := in.actor("victim").GetWorker()
		slow := in.slowRequest("victim", 60_000)
		killOnlyRunningSandbox(t, worker)
		var r reply
		select {
		case r = <-slow:
		case <-time.After(30 * time.Second):
			t.Fatal("no answer 30 s after the actor's sandbox was killed")
		}
		if r.err != nil {
			t.Fatalf("request to the killed actor: %v", r.err)
		}
		// slowRequest's reply body is trimmed: put back the newline.
		in.assertRouterFailure(t, "victim", r.code, r.body+"\n", r.header)
		if r.code != http.StatusServiceUnavailable && r.code != http.StatusBadGateway {
			t.Errorf("got %d %q, want 503 or 502", r.code, r.body)
		}
		t.Logf("killed mid-request: %d %q", r.code, r.body)
	})

	t.Run("restore failed", func(t *testing.T) {
		in.ate("create", "actor", "broken", "--template", "durable")
		in.mustCount("default/broken", 1)
		in.suspend("broken")
		// Same size, garbage content: fails inside runsc restore, whose
		// error names the runtime, paths and the worker's namespace.
		in.breakSnapshot("broken")
		code, body, hdr, err := in.request(http.MethodGet, "default/broken", "/", "")
		if err != nil {
			t.Fatal(err)
		}
		rid := in.assertRouterFailure(t, "broken", code, body, hdr)
		if code != http.StatusBadGateway ||
			!strings.HasPrefix(body, "actor default/broken could not be resumed; its last snapshot is kept and the next request tries again (") {
			t.Errorf("got %d %q, want 502 saying the resume failed and the snapshot is kept", code, body)
		}
		in.waitLogRecord(t, rid, "request failed", "resume failed")
	})
}

var requestIDRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

// assertRouterFailure checks a failed request to actor (default
// atespace): one Ate-Request-Id, which ends the body; no tunnel marker;
// nothing internal in body or headers; and a router log record with that
// id and the cause. It returns the request id.
func (in *installation) assertRouterFailure(t *testing.T, actor string, code int, body string, hdr http.Header) string {
	t.Helper()
	ids := hdr.Values("Ate-Request-Id")
	if len(ids) != 1 || !requestIDRe.MatchString(ids[0]) {
		t.Fatalf("Ate-Request-Id = %q, want one fresh id (answer %d %q)", ids, code, body)
	}
	rid := ids[0]
	if !strings.HasPrefix(body, "actor default/"+actor+" ") || !strings.HasSuffix(body, " (request id "+rid+")\n") {
		t.Errorf("body %q does not name the actor and end with the request id %s", body, rid)
	}
	if v := hdr.Values("Ate-Tunnel-Error"); len(v) > 0 {
		t.Errorf("the tunnel's marker reached the client: %q", v)
	}
	leaks := []string{"169.254.", "127.0.0.1", "netns", "gvisor", "runsc", "/var", "/run", "rpc error", "desc =",
		"tunnel", "unavailable", "failedprecondition", "internal", "exit status", "8080", "8081",
		strings.ToLower(in.dataDir), strings.ToLower(repoDir)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, err := in.client.ListWorkers(ctx, &atev1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws.GetWorkers() {
		// The worker's name is its namespace's; its prefix is the node's.
		prefix := w.GetName()[:strings.LastIndex(w.GetName(), "-")]
		leaks = append(leaks, strings.ToLower(w.GetName()), strings.ToLower(prefix), w.GetTunnelAddress())
	}
	check := func(where, s string) {
		for _, leak := range leaks {
			if strings.Contains(strings.ToLower(s), leak) {
				t.Errorf("%s %q contains %q", where, s, leak)
			}
		}
	}
	// The id is random hex, which may spell a port number.
	check("body", strings.TrimSuffix(body, " (request id "+rid+")\n"))
	for k, vs := range hdr {
		check("header name", k)
		if http.CanonicalHeaderKey(k) == "Ate-Request-Id" {
			continue
		}
		for _, v := range vs {
			check("header "+k, v)
		}
	}
	rec := in.waitLogRecord(t, rid, "request failed", "")
	g, _ := rec["actor"].(map[string]any)
	if g["name"] != actor || g["atespace"] != "default" || rec["status"] != float64(code) {
		t.Errorf("router's record %v, want actor %s in default, status %d", rec, actor, code)
	}
	return rid
}

// waitLogRecord waits up to 10 s for `ate up`'s log record with msg and
// request_id rid whose err contains cause, and returns it.
func (in *installation) waitLogRecord(t *testing.T, rid, msg, cause string) map[string]any {
	t.Helper()
	var found map[string]any
	waitFor(t, fmt.Sprintf("a %q record of request %s with cause %q", msg, rid, cause), 10*time.Second, func() bool {
		for _, rec := range in.logRecords(msg) {
			if err, _ := rec["err"].(string); rec["request_id"] == rid && strings.Contains(err, cause) {
				found = rec
				return true
			}
		}
		return false
	})
	return found
}

// killOnlyRunningSandbox SIGKILLs the sandbox of the only running
// container of worker's node, as the OOM killer would; the node agent is
// not told.
func killOnlyRunningSandbox(t *testing.T, worker string) {
	t.Helper()
	root := filepath.Join("/run/ate", worker[:strings.LastIndex(worker, "-")])
	out, err := exec.Command(gvisor.DefaultRunscPath(), "--root", root, "list", "-format=json").Output()
	if err != nil {
		t.Fatalf("runsc list: %v", err)
	}
	var list []struct{ ID, Status string }
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("runsc list: %v: %s", err, out)
	}
	var running []string
	for _, c := range list {
		if c.Status == "running" {
			running = append(running, c.ID)
		}
	}
	if len(running) != 1 {
		t.Fatalf("running containers %q, want exactly the actor's: %s", running, out)
	}
	if out, err := exec.Command(gvisor.DefaultRunscPath(), "--root", root, "kill", running[0], "KILL").CombinedOutput(); err != nil {
		t.Fatalf("runsc kill: %v %s", err, out)
	}
}
