package cli

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestParseTemplateRestoreFields: onRestore and newActors reach the spec
// as written (the server validates them).
func TestParseTemplateRestoreFields(t *testing.T) {
	const doc = "name: t\ncontainers:\n- name: c\n  image: oci:/x\n  ports: [8080]\n" +
		"onRestore: {httpPost: {path: /ate/restored, port: 8080}, timeoutSeconds: 5}\nnewActors: coldBoot\n"
	got, err := parseTemplate([]byte(doc), "/base")
	if err != nil {
		t.Fatal(err)
	}
	want := &atev1.ActorTemplateSpec{
		Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x", Ports: []int32{8080}}},
		OnRestore:  &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Path: "/ate/restored", Port: 8080}, TimeoutSeconds: 5},
		NewActors:  "coldBoot",
	}
	if !proto.Equal(got.GetSpec(), want) {
		t.Errorf("got %v\nwant %v", got.GetSpec(), want)
	}
	if _, err := parseTemplate([]byte("name: t\ncontainers:\n- name: c\n  image: oci:/x\nonRestore: {httpGet: {path: /, port: 1}}\n"), "/base"); err == nil ||
		!strings.Contains(err.Error(), `unknown field "httpGet"`) {
		t.Errorf("onRestore.httpGet: %v, want it rejected as an unknown field", err)
	}
}

// TestParseTemplateTTL: ttl reaches the spec as written (the server
// validates it); a misspelt key is refused.
func TestParseTemplateTTL(t *testing.T) {
	const base = "name: t\ncontainers:\n- name: c\n  image: oci:/x\n"
	for _, tc := range []struct {
		name, yaml, want, wantErr string
	}{
		{"days", "ttl: {deleteAfterIdle: 14d}\n", "14d", ""},
		{"duration", "ttl:\n  deleteAfterIdle: 36h\n", "36h", ""},
		{"absent", "", "", ""},
		{"snake case", "ttl: {delete_after_idle: 14d}\n", "", `unknown field "delete_after_idle"`},
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
			if d := got.GetSpec().GetTtl().GetDeleteAfterIdle(); d != tc.want {
				t.Fatalf("deleteAfterIdle = %q, want %q", d, tc.want)
			}
		})
	}
}
