package cli

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestParseTemplateStreams: streams reaches the spec as written (the
// server validates its values); a misspelt key is refused.
func TestParseTemplateStreams(t *testing.T) {
	const base = "name: t\ncontainers:\n- name: c\n  image: oci:/x\n"
	for _, tc := range []struct {
		name, yaml string
		want       *atev1.StreamPolicy
		wantErr    string
	}{
		{"both", "streams: {idle: ignore, wakeOn: request}\n", &atev1.StreamPolicy{Idle: "ignore", WakeOn: "request"}, ""},
		{"one", "streams:\n  wakeOn: any\n", &atev1.StreamPolicy{WakeOn: "any"}, ""},
		{"absent", "", nil, ""},
		{"snake case", "streams: {wake_on: request}\n", nil, `unknown field "wake_on"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTemplate([]byte(base+tc.yaml), "/base")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sp := got.GetSpec().GetStreams(); !proto.Equal(sp, tc.want) {
				t.Fatalf("streams = %v, want %v", sp, tc.want)
			}
		})
	}
}
