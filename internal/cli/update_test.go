package cli

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
)

func TestUpdateActorTemplate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stdout   []string // substrings
		stderr   string
		template string // counter-0's template afterwards
	}{
		{"moves a suspended actor", []string{"update", "actor", "counter-0", "--template", "counter-v2"}, 0,
			[]string{"actor default/counter-0 moved to template counter-v2 (SUSPENDED)"}, "", "counter-v2"},
		{"refuses a running one", []string{"update", "actor", "counter-1", "--template", "counter-v2"}, 1,
			nil, "is RUNNING: suspend it first", "counter"},
		{"needs --template", []string{"update", "actor", "counter-0"}, 1, nil, `"template" not set`, "counter"},
		{"rollout", []string{"update", "actors", "--from-template", "counter", "--template", "counter-v2"}, 0,
			[]string{"moved default/counter-0 to counter-v2", "skipped default/counter-1: actor default/counter-1 is RUNNING: suspend it first",
				"1 moved to counter-v2, 1 skipped"}, "", "counter-v2"},
		{"rollout to a missing template fails before moving", []string{"update", "actors", "--from-template", "counter", "--template", "nosuch"}, 1,
			nil, "template default/nosuch not found", "counter"},
		{"rollout needs --selector or --from-template", []string{"update", "actors", "--template", "counter-v2"}, 1, nil,
			"at least one of the flags in the group [selector from-template] is required", "counter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := withV2(newFake())
			r := runServer(t, f, tc.args...)
			wantRun(t, r, tc.code, tc.stderr, tc.stdout)
			if got := f.actors["default/counter-0"].GetTemplate(); got != tc.template {
				t.Errorf("counter-0's template = %s, want %s", got, tc.template)
			}
		})
	}
}

func TestGetExpiredActors(t *testing.T) {
	f := newFake()
	r := runServer(t, f, "get", "actors", "--expired")
	if r.code != 0 || !strings.Contains(r.stdout, "counter-0") || strings.Contains(r.stdout, "counter-1") {
		t.Fatalf("exit %d stdout %q stderr %q; want counter-0 only", r.code, r.stdout, r.stderr)
	}
	var sawFilter bool
	for _, req := range f.requests() {
		if l, ok := req.(*atev1.ListActorsRequest); ok && l.GetExpiredOnly() {
			sawFilter = true
		}
	}
	if !sawFilter {
		t.Fatal("no ListActors request carried expired_only")
	}
	if r := runServer(t, newFake(), "get", "actor", "counter-0", "--expired"); r.code == 0 || !strings.Contains(r.stderr, "give no NAME") {
		t.Fatalf("get actor NAME --expired: exit %d stderr %q, want a refusal", r.code, r.stderr)
	}
}

// TestUpdateActorsSelector: the rollout by label selector sends the
// selector to ListActors, moves the matching suspended actors, skips the
// matching running one with the server's reason, leaves the unmatched and
// the already-moved alone, and ANDs with --from-template.
func TestUpdateActorsSelector(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr string
		moved  []string // actors on counter-v2 afterwards, besides d
	}{
		{"selector", []string{"update", "actors", "--selector", "app=notes", "--template", "counter-v2"}, 0,
			[]string{"moved default/a to counter-v2", "moved default/b to counter-v2",
				"skipped default/counter-1: actor default/counter-1 is RUNNING: suspend it first",
				"2 moved to counter-v2, 1 skipped, 1 already on it"}, "", []string{"a", "b"}},
		{"set-based selector, -l", []string{"update", "actors", "-l", "app in (notes),track!=canary", "--template", "counter-v2"}, 0,
			[]string{"moved default/a to counter-v2", "1 moved to counter-v2, 1 skipped, 1 already on it"}, "", []string{"a"}},
		{"with --from-template", []string{"update", "actors", "--selector", "app=notes", "--from-template", "counter", "--template", "counter-v2"}, 0,
			[]string{"moved default/a to counter-v2", "1 moved to counter-v2, 1 skipped\n"}, "", []string{"a"}},
		{"none match", []string{"update", "actors", "--selector", "app=chat", "--template", "counter-v2"}, 0,
			[]string{"0 moved to counter-v2, 0 skipped\n"}, "", nil},
		{"empty selector", []string{"update", "actors", "--selector", "", "--template", "counter-v2"}, 1,
			nil, "give a non-empty --selector or --from-template", nil},
		{"bad selector", []string{"update", "actors", "--selector", "app in (notes", "--template", "counter-v2"}, 1,
			nil, "label_selector", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := labelledFake()
			r := runServer(t, f, tc.args...)
			wantRun(t, r, tc.code, tc.stderr, tc.stdout)
			var moved []string
			for _, name := range []string{"a", "b", "c", "counter-0", "counter-1"} {
				if f.actors["default/"+name].GetTemplate() == "counter-v2" {
					moved = append(moved, name)
				}
			}
			if !slices.Equal(moved, tc.moved) {
				t.Errorf("on counter-v2 afterwards: %v, want %v", moved, tc.moved)
			}
			if tc.code == 0 && !sentSelector(f, tc.args) {
				t.Error("no ListActors request carried the selector")
			}
		})
	}
}

// labelledFake is newFake with labels: counter-1 (RUNNING), a (canary on
// template other), b and d (already on counter-v2) carry app=notes.
func labelledFake() *fakeControl {
	f := withV2(newFake())
	f.actors["default/counter-1"].Labels = map[string]string{"app": "notes"}
	f.addActor(&atev1.Actor{Atespace: "default", Name: "a", Template: "counter", State: atev1.ActorState_SUSPENDED,
		Labels: map[string]string{"app": "notes", "track": "stable"}})
	f.addActor(&atev1.Actor{Atespace: "default", Name: "b", Template: "counter-old", State: atev1.ActorState_CRASHED,
		Labels: map[string]string{"app": "notes", "track": "canary"}})
	f.addActor(&atev1.Actor{Atespace: "default", Name: "c", Template: "counter", State: atev1.ActorState_SUSPENDED,
		Labels: map[string]string{"app": "mail"}})
	f.addActor(&atev1.Actor{Atespace: "default", Name: "d", Template: "counter-v2", State: atev1.ActorState_SUSPENDED,
		Labels: map[string]string{"app": "notes"}})
	return f
}

// sentSelector reports whether a ListActors request carried the value of
// args' --selector or -l.
func sentSelector(f *fakeControl, args []string) bool {
	i := slices.IndexFunc(args, func(s string) bool { return s == "--selector" || s == "-l" })
	for _, req := range f.requests() {
		if l, ok := req.(*atev1.ListActorsRequest); ok && i >= 0 && l.GetLabelSelector() == args[i+1] {
			return true
		}
	}
	return false
}

// TestActorLabelsCLI: create -l sends the labels, get -o yaml shows them,
// get actors -l sends the selector and --show-labels adds the column.
func TestActorLabelsCLI(t *testing.T) {
	f := labelledFake()
	r := runServer(t, f, "create", "actor", "e", "--template", "counter", "-l", "app=notes", "--labels", "tier=web,track=stable")
	if r.code != 0 {
		t.Fatalf("create: exit %d stderr %q", r.code, r.stderr)
	}
	if got, want := f.actors["default/e"].GetLabels(), map[string]string{"app": "notes", "tier": "web", "track": "stable"}; !maps.Equal(got, want) {
		t.Fatalf("created labels %v, want %v", got, want)
	}
	if r := runServer(t, f, "create", "actor", "g", "--template", "counter", "-l", "novalue"); r.code == 0 || !strings.Contains(r.stderr, `--labels "novalue": want KEY=VALUE`) {
		t.Fatalf("create -l novalue: exit %d stderr %q, want a refusal", r.code, r.stderr)
	}
	if r := runServer(t, f, "get", "actor", "e", "-o", "yaml"); r.code != 0 || !strings.Contains(r.stdout, "labels:\n  app: notes\n  tier: web\n") {
		t.Fatalf("get -o yaml: exit %d stdout %q", r.code, r.stdout)
	}
	r = runServer(t, f, "get", "actors", "-l", "app=notes,track=stable", "--show-labels")
	if r.code != 0 {
		t.Fatalf("get -l: exit %d stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "LABELS") || !strings.HasPrefix(lines[1], "default    a ") ||
		!strings.HasSuffix(lines[1], "app=notes,track=stable") || !strings.HasPrefix(lines[2], "default    e ") {
		t.Fatalf("get actors -l --show-labels:\n%s", r.stdout)
	}
	if r := runServer(t, f, "get", "actors", "-l", "app=none"); r.code != 0 || !strings.Contains(r.stderr, `No actors match "app=none"`) {
		t.Fatalf("get -l app=none: exit %d stderr %q", r.code, r.stderr)
	}
	if r := runServer(t, f, "get", "actor", "a", "-l", "app=notes"); r.code == 0 || !strings.Contains(r.stderr, "give no NAME") {
		t.Fatalf("get actor NAME -l: exit %d stderr %q, want a refusal", r.code, r.stderr)
	}
}

// wantRun fails t unless r exited with code, its stderr contains stderr
// and its stdout each of stdout.
func wantRun(t *testing.T, r result, code int, stderr string, stdout []string) {
	t.Helper()
	if r.code != code || !strings.Contains(r.stderr, stderr) {
		t.Fatalf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, code, stderr)
	}
	for _, want := range stdout {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout %q lacks %q", r.stdout, want)
		}
	}
}

// withV2 adds the template counter-v2, the target of the moves, to f.
func withV2(f *fakeControl) *fakeControl {
	v2 := proto.Clone(f.templates["default/counter"]).(*atev1.ActorTemplate)
	v2.Name, v2.Uid = "counter-v2", "uid-t2"
	f.templates["default/counter-v2"] = v2
	return f
}
