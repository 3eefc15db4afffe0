package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestUserStory is issue 2's acceptance test, step by step: `ate up
// --demo`, curl the counter three ways, suspend, resume on demand with
// memory intact, a second actor from the golden snapshot, and every CLI
// verb in every output format.
func TestUserStory(t *testing.T) {
	in := startUp(t, 2, "--demo")

	// Host header, ate-target-actor header, and a *.localhost URL.
	for i, send := range []func() (int, string){
		func() (int, string) { return hostGet(t, in.routerAddr, "counter-1.default.actors.localhost") },
		func() (int, string) { return in.get("default/counter-1", "/") },
		func() (int, string) {
			resp, err := localhostClient().Get("http://counter-1.default.actors.localhost:" + port(in.routerAddr) + "/")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			return resp.StatusCode, readAll(t, resp)
		},
	} {
		code, body := send()
		if code != http.StatusOK || strings.TrimSpace(body) != fmt.Sprintf("count=%d", i+1) {
			t.Fatalf("request %d = %d %q, want count=%d", i+1, code, body, i+1)
		}
	}

	in.ate("suspend", "actor", "counter-1")
	if out := in.ate("get", "actor", "counter-1", "-o", "json"); !strings.Contains(out, `"state": "SUSPENDED"`) {
		t.Fatalf("get actor -o json after suspend:\n%s", out)
	}
	if w := in.ate("get", "workers", "-o", "json"); strings.Contains(w, atev1.Worker_CLAIMED.String()) {
		t.Fatalf("a worker is still claimed after suspend:\n%s", w)
	}
	in.mustCount("default/counter-1", 4) // resumed on demand, memory intact

	in.ate("create", "actor", "counter-2", "--template", "counter")
	in.mustCount("default/counter-2", 1) // from the golden snapshot
	in.mustCount("default/counter-1", 5)

	for _, args := range [][]string{
		{"get", "actors"}, {"get", "workers"}, {"get", "templates"}, {"get", "atespaces"},
	} {
		for _, o := range []string{"table", "json", "yaml"} {
			out := in.ate(append(args, "-o", o)...)
			if args[1] == "actors" && !strings.Contains(out, "counter-2") {
				t.Fatalf("ate %v -o %s lacks counter-2:\n%s", args, o, out)
			}
		}
	}
	if out := in.ate("get", "actors", "-o", "yaml"); !strings.Contains(out, "state: RUNNING") {
		t.Fatalf("get actors -o yaml:\n%s", out)
	}

	// Delete refuses a RUNNING actor with advice, then works once suspended.
	out, err := in.ateErr("delete", "actor", "counter-2")
	if err == nil || !strings.Contains(out, "suspend it first") {
		t.Fatalf("delete of a RUNNING actor: err=%v out=%q", err, out)
	}
	in.ate("suspend", "actor", "counter-2")
	in.ate("resume", "actor", "counter-2")
	if a := in.actor("counter-2"); a.GetState().String() != "RUNNING" || a.GetWorker() == "" {
		t.Fatalf("after ate resume: %v on %q", a.GetState(), a.GetWorker())
	}
	in.mustCount("default/counter-2", 2)
	in.ate("suspend", "actor", "counter-2")
	in.ate("delete", "actor", "counter-2")
	if code, body := in.get("default/counter-2", "/"); code != http.StatusNotFound {
		t.Fatalf("deleted actor answered %d %q, want 404", code, body)
	}
	if code, _ := in.get("default/nope", "/"); code != http.StatusNotFound {
		t.Fatalf("unknown actor answered %d, want 404", code)
	}
	if code, _ := in.get("default/Bad_Name", "/"); code != http.StatusBadRequest {
		t.Fatalf("invalid actor name answered %d, want 400", code)
	}
}

func hostGet(t *testing.T, addr, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, readAll(t, resp)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func port(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }
