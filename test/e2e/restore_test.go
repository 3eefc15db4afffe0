package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// randomApp is what any app does: it seeds its PRNG from the kernel at
// start-up, then serves
//
//	GET /              {"value": <64 random bits>, "generation": "<contents of /run/ate/generation>"}
//	GET /healthz       the wakeup probe
//	POST /ate/restored reseeds from the kernel (the onRestore hook), 204
//
// The golden snapshot is taken after the seeding, so without the hook
// every actor restored from it draws the same numbers.
const randomApp = `
import json, os, random
from http.server import BaseHTTPRequestHandler, HTTPServer

random.seed(os.urandom(32))

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz":
            return self.reply(200, b"ok")
        with open("/run/ate/generation") as f:
            generation = f.read()
        value = random.getrandbits(64)
        self.reply(200, json.dumps({"value": value, "generation": generation}).encode())

    def do_POST(self):
        if self.path != "/ate/restored":
            return self.reply(404, b"")
        random.seed(os.urandom(32))
        self.send_response(204)
        self.end_headers()

    def reply(self, code, body):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

HTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
`

// randomTemplate writes a template of randomApp on the python-notes image
// (its Debian rootfs has /usr/bin/python3) with extra YAML appended, and
// returns the file.
func randomTemplate(t *testing.T, name, extra string) string {
	t.Helper()
	script, err := json.Marshal(randomApp) // a JSON string is a YAML scalar
	if err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(`name: %s
containers:
- name: app
  image: oci:build/images/python-notes
  command: ["/usr/bin/python3", "-c", %s]
  ports: [8080]
wakeupProbe:
  httpGet: {path: /healthz, port: 8080}
%s`, name, script, extra)
	file := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// draw is one GET / of randomApp.
type draw struct {
	Value      uint64 `json:"value"`
	Generation string `json:"generation"`
}

func (in *installation) draw(actor string) draw {
	in.t.Helper()
	code, body := in.get("default/"+actor, "/")
	var d draw
	if code != http.StatusOK || json.Unmarshal([]byte(body), &d) != nil || d.Generation == "" {
		in.t.Fatalf("GET %s / = %d %q, want 200 and a value and generation", actor, code, body)
	}
	return d
}

// TestRestoreReseeds is issue 12's cloned randomness with a real
// interpreter. Two actors restored from one golden snapshot draw the same
// "random" number — unless the template has an onRestore hook (which
// reseeds). So a template says nothing (issue 30: clones are safe unless
// a template says otherwise) or newActors: coldBoot, its new actors boot
// and draw apart; only newActors: golden without a hook shares the
// build's state, as its author chose. Every start shows a new
// /run/ate/generation either way, and a restore of the actor's own
// snapshot replays its draws as well unless the hook reseeds.
func TestRestoreReseeds(t *testing.T) {
	in := startUp(t, 3)
	templates := map[string]string{
		"reseed":   "onRestore: {httpPost: {path: /ate/restored, port: 8080}}\n",
		"noreseed": "",
		"golden":   "newActors: golden\n",
		"coldboot": "newActors: coldBoot\n",
	}
	for name, extra := range templates {
		in.ate("create", "template", "-f", randomTemplate(t, name, extra))
	}
	for name := range templates {
		in.waitTemplateReady(name)
	}

	for _, tc := range []struct {
		template string
		hook     bool // onRestore reseeds after every restore
		golden   bool // new actors restore the golden snapshot
	}{
		{"reseed", true, true},
		{"noreseed", false, false},
		{"golden", false, true},
		{"coldboot", false, false},
	} {
		t.Run(tc.template, func(t *testing.T) {
			// The installation's helpers fail the test they hold; t.Run
			// returns only when this subtest is done.
			parent := in.t
			in.t = t
			defer func() { in.t = parent }()
			a, b := tc.template+"-a", tc.template+"-b"
			for _, name := range []string{a, b} {
				in.ate("create", "actor", name, "--template", tc.template)
			}
			da, db := in.draw(a), in.draw(b)
			if da.Generation == db.Generation {
				t.Errorf("both actors read generation %s", da.Generation)
			}
			if same := da.Value == db.Value; same != (tc.golden && !tc.hook) {
				t.Errorf("values %d and %d: equal %v, want %v (hook %v, golden %v)", da.Value, db.Value, same, !same, tc.hook, tc.golden)
			}
			// Both started as the template says: restored or booted.
			for _, name := range []string{a, b} {
				if from := in.firstResumeSource(name); (from != "") != tc.golden {
					t.Errorf("actor %s first started from snapshot %q; want the golden snapshot %v", name, from, tc.golden)
				}
			}

			// A restore of a's own snapshot: a new generation, and, with
			// the hook, new draws. revert puts a back at that snapshot, so
			// a second restore of it shows whether draws are replayed.
			in.ate("suspend", "actor", a)
			first := in.draw(a)
			if first.Generation == da.Generation {
				t.Errorf("generation %s unchanged across a suspend and restore", da.Generation)
			}
			if tc.hook && first.Value == da.Value {
				t.Errorf("value %d repeated after the actor's own restore, despite the hook", da.Value)
			}
			in.ate("revert", "actor", a)
			again := in.draw(a)
			if again.Generation == first.Generation {
				t.Errorf("generation %s unchanged across two restores of one snapshot", first.Generation)
			}
			if replayed := again.Value == first.Value; replayed == tc.hook {
				t.Errorf("two restores of one snapshot drew %d and %d: replayed %v, want %v (hook %v)",
					first.Value, again.Value, replayed, !tc.hook, tc.hook)
			}
			t.Logf("new actors drew %+v and %+v; %s's own snapshot, restored twice, %+v and %+v", da, db, a, first, again)
			// Free the workers for the next template's actors.
			for _, name := range []string{a, b} {
				in.ate("suspend", "actor", name)
			}
		})
	}
	if !strings.Contains(in.logText(), `"msg":"restore hook answered"`) {
		t.Error("the node never logged a restore hook call")
	}
}

// firstResumeSource returns the snapshot the node's first "actor resumed"
// record for actor names ("" is a cold boot).
func (in *installation) firstResumeSource(actor string) string {
	in.t.Helper()
	for _, rec := range in.logRecords("actor resumed") {
		// The API server's record, which names the snapshot; the
		// router's follows it.
		if _, ok := rec["snapshot"]; ok && loggedActor(rec) == actor {
			snap, _ := rec["snapshot"].(string)
			return snap
		}
	}
	in.t.Fatalf("no \"actor resumed\" record for %s", actor)
	return ""
}
