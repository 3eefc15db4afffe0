package checkpoint

import (
	"encoding/json"
	"testing"
)

func TestSourceRoundTrip(t *testing.T) {
	for s, name := range map[Source]string{SourceCold: "cold", SourceDurable: "durable", SourceGolden: "golden", SourcePaused: "paused"} {
		if s.String() != name {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), name)
		}
		if b, err := json.Marshal(s); err != nil || string(b) != `"`+name+`"` {
			t.Errorf("%s encoded as %s, %v", s, b, err)
		}
		if p, err := ParseSource(name); err != nil || p != s {
			t.Errorf("ParseSource(%q) = %v, %v", name, p, err)
		}
	}
	if got := Source(9).String(); got != "Source(9)" {
		t.Errorf("Source(9).String() = %q", got)
	}
}

func TestParseSourceRefuses(t *testing.T) {
	for _, in := range []string{"", "Paused", "warm", "suspend"} {
		if _, err := ParseSource(in); err == nil {
			t.Errorf("ParseSource(%q) accepted", in)
		}
	}
}
