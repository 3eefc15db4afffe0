package names

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestValidateLabel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"a", true}, {"counter-1", true}, {"0abc", true}, {strings.Repeat("a", 63), true},
		{"", false}, {strings.Repeat("a", 64), false}, {"-a", false}, {"a-", false},
		{"A", false}, {"a_b", false}, {"a.b", false}, {"ä", false}, {"a/b", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			err := ValidateLabel("actor name", tc.in)
			if (err == nil) != tc.want {
				t.Fatalf("ValidateLabel(%q) = %v, want ok=%v", tc.in, err, tc.want)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}

func TestParseActorKey(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"counter-1", "default/counter-1", true},
		{"team/counter-1", "team/counter-1", true},
		{"team/", "", false}, {"/x", "", false}, {"a/b/c", "", false}, {"Bad", "", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			k, err := ParseActorKey(tc.in, DefaultAtespace)
			if (err == nil) != tc.ok || (tc.ok && k.String() != tc.want) {
				t.Fatalf("ParseActorKey(%q) = %v, %v; want %q ok=%v", tc.in, k, err, tc.want, tc.ok)
			}
		})
	}
}

func TestParseHost(t *testing.T) {
	for _, tc := range []struct {
		host, want string
		ok, err    bool
	}{
		{"counter-1.default.actors.localhost", "default/counter-1", true, false},
		{"counter-1.default.actors.localhost:8080", "default/counter-1", true, false},
		{"Counter-1.Default.actors.localhost.", "default/counter-1", true, false},
		{"actors.localhost", "", false, false},
		{"x.actors.localhost", "", false, false},
		{"a.b.c.actors.localhost", "", false, false},
		{"127.0.0.1:8080", "", false, false},
		{"a_b.default.actors.localhost", "", true, true},
	} {
		t.Run(tc.host, func(t *testing.T) {
			k, ok, err := ParseHost(tc.host, "actors.localhost")
			if ok != tc.ok || (err != nil) != tc.err || (ok && !tc.err && k.String() != tc.want) {
				t.Fatalf("ParseHost(%q) = %v, %v, %v", tc.host, k, ok, err)
			}
		})
	}
}

func TestActorKeyText(t *testing.T) {
	k := ActorKey{Atespace: "team", Name: "counter-1"}
	b, err := json.Marshal(struct {
		A ActorKey `json:"a"`
		Z ActorKey `json:"z"`
	}{A: k})
	if err != nil || string(b) != `{"a":"team/counter-1","z":""}` {
		t.Fatalf("encoded %s, %v", b, err)
	}
	var back struct{ A, Z ActorKey }
	if err := json.Unmarshal(b, &back); err != nil || back.A != k || !back.Z.IsZero() {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	var bad ActorKey
	if err := bad.UnmarshalText([]byte("no-slash")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("UnmarshalText(no-slash) = %v, want ErrInvalid", err)
	}
}

func TestActorKeyLogValue(t *testing.T) {
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})).Info("x", "actor", ActorKey{Atespace: "team", Name: "a"}, "evicted", ActorKey{})
	if got, want := buf.String(), "level=INFO msg=x actor.name=a actor.atespace=team evicted=\"\"\n"; got != want {
		t.Fatalf("logged %q, want %q", got, want)
	}
}
