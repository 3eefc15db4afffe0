package auth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"substrate.dev/ate/internal/store"
)

func TestParseTokenCSV(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []StaticToken
		err      string
	}{
		{name: "kubernetes format", in: "# comment\ntok1,alice,u1,\"devs,ops\"\n\ntok2,bob,u2\n",
			want: []StaticToken{{Token: "tok1", User: "alice", UID: "u1", Groups: []string{"devs", "ops"}}, {Token: "tok2", User: "bob", UID: "u2"}}},
		{name: "too few fields", in: "tok1,alice\n", err: "line 1"},
		{name: "empty user", in: "tok1,,u1\n", err: "empty token or user"},
		{name: "repeated token", in: "t,a,1\nt,b,2\n", err: "repeated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTokenCSV(strings.NewReader(tc.in), "tokens.csv")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("= %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestChain(t *testing.T) {
	st, err := NewStatic([]StaticToken{AdminToken("admintok"), {Token: "u", User: "alice", Groups: []string{"devs"}},
		{Token: "r", Component: &Identity{Component: ComponentRouter, Name: "up"}}})
	if err != nil {
		t.Fatal(err)
	}
	c := Chain{st}
	ctx := context.Background()
	for _, tc := range []struct {
		tok  string
		want string
	}{
		{"admintok", AdminUser}, {"u", "alice"}, {"r", "component:router/up"},
	} {
		p, err := c.Authenticate(ctx, tc.tok)
		if err != nil || p.String() != tc.want {
			t.Errorf("Authenticate(%q) = %v, %v; want %s", tc.tok, p, err, tc.want)
		}
	}
	for _, bad := range []string{"", "admintokx", "admin", "eyJ.x.y"} {
		if _, err := c.Authenticate(ctx, bad); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("Authenticate(%q) err = %v, want ErrUnauthenticated", bad, err)
		}
	}
}

func TestEnsureAdminToken(t *testing.T) {
	dir := t.TempDir()
	a, err := EnsureAdminToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, AdminTokenName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin token file: %v, mode %v; want 0600", err, fi.Mode())
	}
	b, err := EnsureAdminToken(dir)
	if err != nil || a != b || len(a) < 40 {
		t.Fatalf("second start: %q, %v; want the first token %q", b, err, a)
	}
}

func TestGrants(t *testing.T) {
	bindings := append(BuiltinBindings(),
		&store.RoleBinding{Name: "a-ed", Atespace: "a", Role: "editor", Users: []string{"ed"}},
		&store.RoleBinding{Name: "b-view", Atespace: "b", Role: "viewer", Groups: []string{"viewers"}},
		&store.RoleBinding{Name: "all-view", Atespace: "*", Role: "viewer", Users: []string{"auditor"}},
	)
	for _, tc := range []struct {
		p                            *Principal
		admin                        bool
		readA, writeA, readB, writeB bool
	}{
		{p: &Principal{Name: AdminUser, Groups: []string{AdminsGroup}}, admin: true, readA: true, writeA: true, readB: true, writeB: true},
		{p: &Principal{Name: "ed", Groups: []string{"viewers"}}, readA: true, writeA: true, readB: true},
		{p: &Principal{Name: "auditor"}, readA: true, readB: true},
		{p: &Principal{Name: "nobody"}},
		{p: &Principal{Component: &Identity{Component: ComponentRouter, Name: "r"}}},
	} {
		g := GrantsFor(tc.p, bindings)
		got := []bool{g.ClusterAdmin, g.CanRead("a"), g.CanWrite("a"), g.CanRead("b"), g.CanWrite("b")}
		want := []bool{tc.admin, tc.readA, tc.writeA, tc.readB, tc.writeB}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: admin,readA,writeA,readB,writeB = %v, want %v", tc.p, got, want)
		}
	}
}

func TestReadPolicyFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("- name: web-editors\n  atespace: web\n  role: editor\n  users: [alice]\n  groups: [devs]\n"), 0o600)
	list, err := ReadPolicyFile(good)
	if err != nil || len(list) != 1 || list[0].Role != "editor" || list[0].Users[0] != "alice" {
		t.Fatalf("ReadPolicyFile = %+v, %v", list, err)
	}
	for name, body := range map[string]string{
		"role":    "- name: x\n  role: owner\n  users: [a]\n",
		"subject": "- name: x\n  role: viewer\n",
		"field":   "- name: x\n  role: viewer\n  users: [a]\n  user: [b]\n",
	} {
		p := filepath.Join(dir, name+".yaml")
		os.WriteFile(p, []byte(body), 0o600)
		if _, err := ReadPolicyFile(p); err == nil {
			t.Errorf("%s: bad policy file accepted", name)
		}
	}
}
