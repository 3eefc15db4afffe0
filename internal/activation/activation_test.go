package activation

import (
	"encoding/json"
	"testing"
)

func TestKindRoundTrip(t *testing.T) {
	for k, token := range map[Kind]string{None: "none", Warm: "warm", Resumed: "resumed", Joined: "joined"} {
		if k.String() != token {
			t.Errorf("%d.String() = %q, want %q", k, k.String(), token)
		}
		if b, err := json.Marshal(k); err != nil || string(b) != `"`+token+`"` {
			t.Errorf("%s encoded as %s, %v", k, b, err)
		}
		if p, err := ParseKind(token); err != nil || p != k {
			t.Errorf("ParseKind(%q) = %v, %v", token, p, err)
		}
	}
	if got := Kind(9).String(); got != "Kind(9)" {
		t.Errorf("Kind(9).String() = %q", got)
	}
}

func TestParseKind(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Kind
		wantErr bool
	}{
		{"", None, false}, // no header: the router answered itself
		{"Warm", None, true},
		{"resumed;evicted", None, true}, // parameters are the caller's to strip
		{"cold", None, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseKind(tc.in)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("ParseKind(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
