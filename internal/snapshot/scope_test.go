package snapshot

import (
	"strings"
	"testing"

	"substrate.dev/ate/internal/codec"
)

func TestParseScope(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Scope
		wantErr bool
	}{
		{"", ScopeFull, false},
		{"Full", ScopeFull, false},
		{"Data", ScopeData, false},
		{"data", ScopeFull, true},
		{"Memory", ScopeFull, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseScope(tc.in)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("ParseScope(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestManifestScopeOnDisk: manifests keep the scope's name, so those
// written before Scope was typed still read.
func TestManifestScopeOnDisk(t *testing.T) {
	old := `{"ref":"a/1","createTime":"2026-11-30T00:00:00Z","scope":"Data","files":[]}`
	var m Manifest
	if err := codec.Unmarshal([]byte(old), &m); err != nil || m.Scope != ScopeData {
		t.Fatalf("old manifest decoded to scope %v, %v", m.Scope, err)
	}
	b, err := codec.Marshal(Manifest{Ref: "a/1", Scope: ScopeData})
	if err != nil || !strings.Contains(string(b), `"scope":"Data"`) {
		t.Fatalf("manifest encoded as %s, %v", b, err)
	}
}
