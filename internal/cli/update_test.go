package cli

import (
	"strings"
	"testing"

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
		{"rollout needs --from-template", []string{"update", "actors", "--template", "counter-v2"}, 1, nil, `"from-template" not set`, "counter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			r := runServer(t, f, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, tc.code, tc.stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout %q lacks %q", r.stdout, want)
				}
			}
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
