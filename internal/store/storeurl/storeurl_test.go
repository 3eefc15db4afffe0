package storeurl

import (
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
