package checkpoint

import (
	"encoding/json"
	"testing"
)

func TestParseAction(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Action
		wantErr bool
	}{
		{"", Suspend, false}, // the default: no action means suspend
		{"suspend", Suspend, false},
		{"pause", Pause, false},
		{"Pause", Suspend, true},
		{"stop", Suspend, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseAction(tc.in)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("ParseAction(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestActionRoundTrip(t *testing.T) {
	for a, done := range map[Action]string{Suspend: "suspended", Pause: "paused"} {
		// slog's JSON handler and the CLI's output encode it as text.
		b, err := json.Marshal(a)
		if err != nil || string(b) != `"`+a.String()+`"` {
			t.Fatalf("%s encoded as %s, %v", a, b, err)
		}
		if a.Done() != done {
			t.Fatalf("%s.Done() = %q, want %q", a, a.Done(), done)
		}
		if p, err := ParseAction(a.String()); err != nil || p != a {
			t.Fatalf("ParseAction(%q) = %v, %v", a.String(), p, err)
		}
	}
	if got := Action(9).String(); got != "Action(9)" {
		t.Fatalf("Action(9).String() = %q", got)
	}
}
