package cli

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
)

// TestVerbRequests checks that each verb sends the request it should: names,
// the default atespace, -n and the ATESPACE/NAME form.
func TestVerbRequests(t *testing.T) {
	dir := t.TempDir()
	tmplFile := filepath.Join(dir, "counter.yaml")
	writeFile(t, tmplFile, "name: web\ncontainers:\n- name: web\n  image: oci-archive:/abs/web.tar\n  ports: [80]\n")

	for _, tc := range []struct {
		name    string
		args    []string
		want    proto.Message // the first request the server sees
		wantOut string        // substring of stdout
	}{
		{"get actor default atespace", []string{"get", "actor", "counter-1"},
			&atev1.GetActorRequest{Atespace: "default", Name: "counter-1"}, "counter-1"},
		{"get actor slash form", []string{"get", "actor", "team/counter-1"},
			&atev1.GetActorRequest{Atespace: "team", Name: "counter-1"}, "team"},
		{"get actor -n", []string{"get", "actor", "-n", "team", "counter-1"},
			&atev1.GetActorRequest{Atespace: "team", Name: "counter-1"}, "team"},
		{"slash form beats -n", []string{"get", "actor", "-n", "other", "team/counter-1"},
			&atev1.GetActorRequest{Atespace: "team", Name: "counter-1"}, "team"},
		{"get actors", []string{"get", "actors"},
			&atev1.ListActorsRequest{Atespace: "default", PageSize: listPageSize}, "counter-0"},
		{"get actors --atespace", []string{"get", "actors", "--atespace", "team"},
			&atev1.ListActorsRequest{Atespace: "team", PageSize: listPageSize}, "team"},
		{"get template", []string{"get", "template", "counter"},
			&atev1.GetActorTemplateRequest{Atespace: "default", Name: "counter"}, "READY"},
		{"get templates -n", []string{"get", "templates", "-n", "team"},
			&atev1.ListActorTemplatesRequest{Atespace: "team"}, ""},
		{"get workers", []string{"get", "workers"}, &atev1.ListWorkersRequest{}, "w-1"},
		{"get worker", []string{"get", "worker", "w-0"}, &atev1.ListWorkersRequest{}, "default/counter-1"},
		{"get atespaces", []string{"get", "atespaces"}, &atev1.ListAtespacesRequest{}, "team"},
		{"get atespace", []string{"get", "atespace", "team"}, &atev1.GetAtespaceRequest{Name: "team"}, "team"},
		{"create actor", []string{"create", "actor", "counter-2", "--template", "counter"},
			&atev1.CreateActorRequest{Actor: &atev1.Actor{Atespace: "default", Name: "counter-2", Template: "counter"}},
			"actor default/counter-2 created"},
		{"create actor selectors", []string{"create", "actor", "team/c", "--template", "counter", "--selector", "zone=a", "--selector", "disk=ssd,gpu="},
			&atev1.CreateActorRequest{Actor: &atev1.Actor{Atespace: "team", Name: "c", Template: "counter",
				WorkerSelector: map[string]string{"zone": "a", "disk": "ssd", "gpu": ""}}},
			"actor team/c created"},
		{"create template", []string{"create", "template", "-n", "team", "-f", tmplFile},
			&atev1.CreateActorTemplateRequest{Template: &atev1.ActorTemplate{Atespace: "team", Name: "web",
				Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "web", Image: "oci-archive:/abs/web.tar", Ports: []int32{80}}}}}},
			"template team/web created (golden snapshot building)"},
		{"create atespace", []string{"create", "atespace", "new"}, &atev1.CreateAtespaceRequest{Name: "new"}, "atespace new created"},
		{"delete actor", []string{"delete", "actor", "counter-0"},
			&atev1.DeleteActorRequest{Atespace: "default", Name: "counter-0"}, "actor default/counter-0 deleted"},
		{"delete actor --force", []string{"delete", "actor", "counter-0", "--force"},
			&atev1.DeleteActorRequest{Atespace: "default", Name: "counter-0", Force: true}, "actor default/counter-0 deleted"},
		{"delete actor slash form", []string{"delete", "actor", "team/counter-1"},
			&atev1.DeleteActorRequest{Atespace: "team", Name: "counter-1"}, "actor team/counter-1 deleted"},
		{"delete template", []string{"delete", "template", "counter"},
			&atev1.DeleteActorTemplateRequest{Atespace: "default", Name: "counter"}, "template default/counter deleted"},
		{"delete atespace", []string{"delete", "atespace", "team"}, &atev1.DeleteAtespaceRequest{Name: "team"}, "atespace team deleted"},
		{"suspend actor", []string{"suspend", "actor", "counter-1"},
			&atev1.SuspendActorRequest{Atespace: "default", Name: "counter-1"}, "actor default/counter-1 suspended (SUSPENDED)"},
		{"resume actor", []string{"resume", "actor", "team/counter-1"},
			&atev1.ResumeActorRequest{Atespace: "team", Name: "counter-1"}, "actor team/counter-1 resumed (RUNNING on worker w-1)"},
		{"wait actor", []string{"wait", "actor", "counter-1", "--for", "state=running"},
			&atev1.GetActorRequest{Atespace: "default", Name: "counter-1"}, "actor default/counter-1 is RUNNING"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			res := runServer(t, f, tc.args...)
			if res.code != 0 {
				t.Fatalf("exit %d, stderr %q", res.code, res.stderr)
			}
			reqs := f.requests()
			if len(reqs) == 0 {
				t.Fatal("server saw no request")
			}
			if !proto.Equal(reqs[0], tc.want) {
				t.Errorf("request %T{%v}, want %T{%v}", reqs[0], reqs[0], tc.want, tc.want)
			}
			if !strings.Contains(res.stdout, tc.wantOut) {
				t.Errorf("stdout %q does not contain %q", res.stdout, tc.wantOut)
			}
		})
	}
}

// TestJSONOutput pins the exact JSON shape scripts and the acceptance test
// rely on: `"key": value` with one space, enums by name, lowerCamel keys.
func TestJSONOutput(t *testing.T) {
	res := runServer(t, newFake(), "get", "actor", "team/counter-1", "-o", "json")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	want := `{
  "atespace": "team",
  "name": "counter-1",
  "uid": "uid-team-counter-1",
  "template": "counter",
  "state": "SUSPENDED",
  "snapshot": "s-2",
  "createTime": "2026-02-28T10:00:00Z",
  "reason": "EVICTED",
  "evictedFor": "team/counter-2"
}
`
	if res.stdout != want {
		t.Errorf("got\n%s\nwant\n%s", res.stdout, want)
	}
	if !strings.Contains(res.stdout, `"state": "SUSPENDED"`) {
		t.Error(`output lacks "state": "SUSPENDED"`)
	}
}

func TestListOutputs(t *testing.T) {
	t.Run("json items", func(t *testing.T) {
		res := runServer(t, newFake(), "get", "actors", "-o", "json")
		var got struct{ Items []map[string]any }
		if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, res.stdout)
		}
		if len(got.Items) != 2 || got.Items[1]["state"] != "RUNNING" {
			t.Errorf("items = %v", got.Items)
		}
		if !strings.HasPrefix(res.stdout, "{\n  \"items\": [\n    {\n      \"atespace\": \"default\",") {
			t.Errorf("unexpected layout:\n%s", res.stdout)
		}
	})
	t.Run("json empty list", func(t *testing.T) {
		res := runServer(t, newFake(), "get", "templates", "-n", "team", "-o", "json")
		if res.stdout != "{\n  \"items\": []\n}\n" {
			t.Errorf("got %q", res.stdout)
		}
	})
	t.Run("yaml", func(t *testing.T) {
		res := runServer(t, newFake(), "get", "actor", "counter-1", "-o", "yaml")
		if !strings.Contains(res.stdout, "state: RUNNING\n") || !strings.Contains(res.stdout, "worker: w-0\n") {
			t.Errorf("yaml:\n%s", res.stdout)
		}
		var back map[string]any
		if err := yaml.Unmarshal([]byte(res.stdout), &back); err != nil || back["name"] != "counter-1" {
			t.Errorf("yaml does not round-trip: %v %v", err, back)
		}
	})
	t.Run("yaml list", func(t *testing.T) {
		res := runServer(t, newFake(), "get", "workers", "-o", "yaml")
		if !strings.HasPrefix(res.stdout, "items:\n- actor: default/counter-1\n") {
			t.Errorf("yaml:\n%s", res.stdout)
		}
	})
}

func TestTableOutput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"actors", []string{"get", "actors"}, "" +
			"ATESPACE   NAME        TEMPLATE   STATE       REASON   WORKER   SNAPSHOT   LAST ACTIVITY   AGE\n" +
			"default    counter-0   counter    SUSPENDED   idle     <none>   <none>     <none>          90s\n" +
			"default    counter-1   counter    RUNNING     <none>   w-0      s-7        12s ago         5m\n"},
		{"one actor", []string{"get", "actor", "team/counter-1"}, "" +
			"ATESPACE   NAME        TEMPLATE   STATE       REASON                       WORKER   SNAPSHOT   LAST ACTIVITY   AGE\n" +
			"team       counter-1   counter    SUSPENDED   evicted for team/counter-2   <none>   s-2        <none>          26h\n"},
		{"templates", []string{"get", "templates"}, "" +
			"ATESPACE   NAME      PHASE   IMAGE                 AGE\n" +
			"default    counter   READY   oci:/images/counter   3h\n"},
		{"workers", []string{"get", "workers"}, "" +
			"NAME   NODE    PHASE     ACTOR\n" +
			"w-0    local   CLAIMED   default/counter-1\n" +
			"w-1    local   FREE      <none>\n"},
		{"atespaces", []string{"get", "atespaces"}, "" +
			"NAME      AGE\n" +
			"default   3d\n" +
			"team      3d\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runServer(t, newFake(), tc.args...)
			if res.stdout != tc.want {
				t.Errorf("got\n%s\nwant\n%s", res.stdout, tc.want)
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		res := runServer(t, newFake(), "get", "actors", "-n", "new")
		if res.code != 0 || res.stdout != "" || res.stderr != "No actors found in atespace new.\n" {
			t.Errorf("got %+v", res)
		}
	})
}

func TestPagination(t *testing.T) {
	f := newFake()
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		f.addActor(&atev1.Actor{Atespace: "team", Name: n, State: atev1.ActorState_SUSPENDED})
	}
	f.pageSize = 2
	res := runServer(t, f, "get", "actors", "-n", "team", "-o", "json")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	var got struct{ Items []struct{ Name string } }
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
		t.Fatal(err)
	}
	var gotNames []string
	for _, it := range got.Items {
		gotNames = append(gotNames, it.Name)
	}
	if want := []string{"a", "b", "c", "counter-1", "d", "e"}; !slices.Equal(gotNames, want) {
		t.Errorf("names = %v, want %v", gotNames, want)
	}
	var tokens []string
	for _, r := range f.requests() {
		tokens = append(tokens, r.(*atev1.ListActorsRequest).GetPageToken())
	}
	if want := []string{"", "2", "4"}; !slices.Equal(tokens, want) {
		t.Errorf("page tokens sent = %q, want %q", tokens, want)
	}

	t.Run("repeated token", func(t *testing.T) {
		f := newFake()
		f.pageSize, f.stuckPage = 1, true
		res := runServer(t, f, "get", "actors")
		if res.code == 0 || !strings.Contains(res.stderr, "repeated page token") {
			t.Errorf("got %+v", res)
		}
	})
}

// TestClientSideValidation checks bad input fails before any RPC, with the
// names package's message.
func TestClientSideValidation(t *testing.T) {
	label := func(kind, s string) string { return "Error: " + names.ValidateLabel(kind, s).Error() + "\n" }
	_, keyErr := names.ParseActorKey("a/b/c", "default")
	for _, tc := range []struct {
		name string
		args []string
		want string // exact stderr, or a substring if it starts with "~"
	}{
		{"actor name", []string{"get", "actor", "Counter"}, label("actor name", "Counter")},
		{"actor key", []string{"delete", "actor", "a/b/c"}, "Error: " + keyErr.Error() + "\n"},
		{"atespace flag", []string{"get", "actors", "-n", "Team"}, label("atespace", "Team")},
		{"atespace in key", []string{"suspend", "actor", "te_am/x"}, label("atespace", "te_am")},
		{"template flag", []string{"create", "actor", "x", "--template", "Bad"}, label("template name", "Bad")},
		{"template arg", []string{"delete", "template", "a.b"}, label("template name", "a.b")},
		{"atespace arg", []string{"create", "atespace", "x-"}, label("atespace", "x-")},
		{"worker arg", []string{"get", "worker", "W0"}, label("worker name", "W0")},
		{"selector", []string{"create", "actor", "x", "--template", "t", "--selector", "zone"}, "~want KEY=VALUE"},
		{"wait condition", []string{"wait", "actor", "x", "--for", "state=ASLEEP"}, "~want state=STATE with STATE one of SUSPENDED, RESUMING, RUNNING"},
		{"wait condition key", []string{"wait", "actor", "x", "--for", "phase=RUNNING"}, "~want state=STATE"},
		{"output format", []string{"get", "actors", "-o", "xml"}, "Error: unknown output format \"xml\": use table, json or yaml\n"},
		{"missing template flag", []string{"create", "actor", "x"}, "~[template from-tag from-actor] is required"},
		{"template and tag", []string{"create", "actor", "x", "--template", "t", "--from-tag", "v1"}, "~none of the others can be"},
		{"no kind", []string{"delete"}, "Error: ate delete needs a kind: actor, template, atespace, alarm, tag, ingresstoken, rolebinding\n"},
		{"unknown kind", []string{"get", "actr", "x"}, "Error: unknown kind \"actr\" for ate get: use actor, template, worker, node, rolebinding, atespace, alarms, tag, events, ingresstoken\n"},
		{"too many args", []string{"get", "actor", "a", "b"}, "~accepts at most 1 arg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			res := runServer(t, f, tc.args...)
			if res.code == 0 {
				t.Fatalf("exit 0, stdout %q", res.stdout)
			}
			if sub, ok := strings.CutPrefix(tc.want, "~"); ok {
				if !strings.Contains(res.stderr, sub) || !strings.HasPrefix(res.stderr, "Error: ") {
					t.Errorf("stderr %q, want it to contain %q", res.stderr, sub)
				}
			} else if res.stderr != tc.want {
				t.Errorf("stderr %q, want %q", res.stderr, tc.want)
			}
			if n := len(f.requests()); n != 0 {
				t.Errorf("server saw %d requests, want none", n)
			}
		})
	}
}

func TestServerErrors(t *testing.T) {
	t.Run("failed precondition", func(t *testing.T) {
		res := runServer(t, newFake(), "delete", "actor", "counter-1")
		want := "Error: actor default/counter-1 is RUNNING; suspend it first (ate suspend actor counter-1)\n"
		if res.code != 1 || res.stderr != want || res.stdout != "" {
			t.Errorf("got %+v, want stderr %q", res, want)
		}
	})
	t.Run("not found", func(t *testing.T) {
		res := runServer(t, newFake(), "get", "actor", "nope")
		if res.code != 1 || res.stderr != "Error: actor default/nope not found\n" {
			t.Errorf("got %+v", res)
		}
	})
	t.Run("client deadline", func(t *testing.T) {
		f := newFake()
		f.noWorkers = true
		addr := serve(t, f)
		res := runCLI(t, "--server", addr, "--timeout", "100ms", "resume", "actor", "counter-0")
		want := "Error: no answer from the ate server at " + addr + " within 100ms (raise --timeout; a resume waits until a worker is free or can be freed)\n"
		if res.code != 1 || res.stderr != want {
			t.Errorf("stderr %q, want %q", res.stderr, want)
		}
	})
	t.Run("unavailable", func(t *testing.T) {
		addr := closedAddr(t)
		res := runCLI(t, "--server", addr, "get", "actors")
		want := "Error: cannot reach the ate server at " + addr
		if res.code != 1 || !strings.HasPrefix(res.stderr, want) || strings.Contains(res.stderr, "rpc error") {
			t.Errorf("stderr %q, want prefix %q", res.stderr, want)
		}
	})
}

func TestWait(t *testing.T) {
	t.Run("reaches state", func(t *testing.T) {
		f := newFake()
		gets := 0
		f.onGet = func(a *atev1.Actor) {
			gets++
			if a.Name == "counter-0" {
				a.State = []atev1.ActorState{atev1.ActorState_SUSPENDED, atev1.ActorState_RESUMING, atev1.ActorState_RUNNING}[min(gets-1, 2)]
			}
		}
		res := runServer(t, f, "wait", "actor", "counter-0", "--for", "state=RUNNING", "-o", "json")
		if res.code != 0 || !strings.Contains(res.stdout, `"state": "RUNNING"`) {
			t.Fatalf("got %+v", res)
		}
		if n := len(f.requests()); n != 3 {
			t.Errorf("polled %d times, want 3", n)
		}
	})
	t.Run("times out", func(t *testing.T) {
		f := newFake()
		f.onGet = func(a *atev1.Actor) { a.State, a.Message = atev1.ActorState_CRASHED, "restore failed" }
		res := runServer(t, f, "wait", "actor", "counter-0", "--for", "state=RUNNING", "--timeout", "100ms")
		want := "Error: timed out after 100ms waiting for actor default/counter-0 to be RUNNING; it is CRASHED: restore failed\n"
		if res.code != 1 || res.stderr != want {
			t.Errorf("stderr %q, want %q", res.stderr, want)
		}
	})
	t.Run("not found ends the wait", func(t *testing.T) {
		res := runServer(t, newFake(), "wait", "actor", "ghost", "--for", "state=RUNNING")
		if res.code != 1 || res.stderr != "Error: actor default/ghost not found\n" {
			t.Errorf("got %+v", res)
		}
	})
}

func TestCreateTemplateFromStdin(t *testing.T) {
	f := newFake()
	addr := serve(t, f)
	root := NewRootCommand(WithGetenv(func(string) string { return "" }))
	var out, errOut strings.Builder
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader("name: web\ncontainers:\n- name: web\n  image: oci:img\n"))
	root.SetArgs([]string{"--server", addr, "create", "template", "-f", "-"})
	if code := Main(t.Context(), root); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	got := f.requests()[0].(*atev1.CreateActorTemplateRequest).GetTemplate().GetSpec().GetContainers()[0].GetImage()
	if want := "oci:" + filepath.Join(cwd, "img"); got != want {
		t.Errorf("image %q, want %q", got, want)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
