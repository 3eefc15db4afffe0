package cli

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestParseTemplateIngress: ingress reaches the spec as written (the
// server validates the policy's value); a misspelt or mistyped field is
// refused naming it.
func TestParseTemplateIngress(t *testing.T) {
	const base = "name: t\ncontainers:\n- name: c\n  image: oci:/x\n"
	for _, tc := range []struct {
		name, yaml string
		want       *atev1.IngressPolicy
		wantErr    string
	}{
		{"token", "ingress: {policy: token}\n", &atev1.IngressPolicy{Policy: "token"}, ""},
		{"public", "ingress:\n  policy: public\n", &atev1.IngressPolicy{Policy: "public"}, ""},
		{"absent", "", nil, ""},
		{"misspelt", "ingress: {polcy: token}\n", nil, `unknown field "polcy"`},
		{"a string", "ingress: token\n", nil, "ingress must be a mapping, not a string"},
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
			if ip := got.GetSpec().GetIngress(); !proto.Equal(ip, tc.want) {
				t.Fatalf("ingress = %v, want %v", ip, tc.want)
			}
		})
	}
}
