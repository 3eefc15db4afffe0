package storeurl

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/store"
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

// TestOpenRetrying: an unreachable database is retried, each failure
// logged, until the context ends; any other error ends at once.
func TestOpenRetrying(t *testing.T) {
	// A port nobody listens on: connection refused, store.ErrUnavailable.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	for _, c := range []struct {
		name            string
		url             string
		wantUnavailable bool
		minRetries      int
	}{
		{name: "unreachable", url: "postgres://ate:s3cret@" + closed + "/ate?connect_timeout=1", wantUnavailable: true, minRetries: 2},
		{name: "not a store URL", url: "mysql://db/ate"},
		{name: "relative bolt path", url: "bolt://ate.db"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, err := OpenRetrying(ctx, c.url, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err == nil || errors.Is(err, store.ErrUnavailable) != c.wantUnavailable {
				t.Fatalf("OpenRetrying: %v, want an error, store.ErrUnavailable %v", err, c.wantUnavailable)
			}
			retries := strings.Count(logs.String(), "record store unreachable; retrying")
			if retries < c.minRetries || (c.minRetries == 0 && retries > 0) {
				t.Errorf("%d retries logged, want at least %d (none when not unreachable):\n%s", retries, c.minRetries, logs.String())
			}
			if strings.Contains(logs.String(), "s3cret") {
				t.Errorf("the password is logged:\n%s", logs.String())
			}
		})
	}
}
