package storeurl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for _, u := range []string{
		"postgres://ate:s3cret@db:5432/ate",
		"postgres://ate@db:5432/ate?sslmode=require&password=s3cret",
	} {
		if got := Redact(u); strings.Contains(got, "s3cret") || !strings.Contains(got, "db:5432") {
			t.Errorf("Redact(%q) = %q: the password shows, or the host is gone", u, got)
		}
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "url")
	if err := os.WriteFile(file, []byte("  postgres://ate:s3cret@db/ate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == EnvVar {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		name    string
		src     Source
		env     string
		want    string
		exposed bool
		err     bool
	}{
		{name: "nothing: the default store", want: ""},
		{name: "environment", env: "postgres://ate:s3cret@db/ate", want: "postgres://ate:s3cret@db/ate"},
		{name: "file, trimmed, over the environment", src: Source{File: file}, env: "postgres://other@db/x", want: "postgres://ate:s3cret@db/ate"},
		{name: "flag with a password: warned", src: Source{URL: "postgres://ate:s3cret@db/ate"}, want: "postgres://ate:s3cret@db/ate", exposed: true},
		{name: "flag with password=", src: Source{URL: "postgres://ate@db/ate?password=s3cret"}, want: "postgres://ate@db/ate?password=s3cret", exposed: true},
		{name: "flag without password", src: Source{URL: "postgres://ate@db/ate"}, want: "postgres://ate@db/ate"},
		{name: "both", src: Source{URL: "bolt:///x.db", File: file}, err: true},
		{name: "missing file", src: Source{File: filepath.Join(dir, "none")}, err: true},
		{name: "empty file", src: Source{File: empty}, err: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, exposed, err := Resolve(c.src, env(c.env))
			if (err != nil) != c.err || got != c.want || exposed != c.exposed {
				t.Fatalf("Resolve = %q, %v, %v; want %q, %v, error %v", got, exposed, err, c.want, c.exposed, c.err)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
}
