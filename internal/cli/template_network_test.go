package cli

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestParseTemplateNetwork: network.egress reaches the spec as written;
// a wrong type names the field in the file's terms.
func TestParseTemplateNetwork(t *testing.T) {
	const doc = "name: t\ncontainers:\n- name: c\n  image: oci:/x\n" +
		"network:\n  egress:\n  - {cidr: 10.0.0.0/8, ports: [443]}\n  - {host: api.example.com}\n"
	got, err := parseTemplate([]byte(doc), "/base")
	if err != nil {
		t.Fatal(err)
	}
	want := &atev1.ActorTemplateSpec{
		Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}},
		Network: &atev1.NetworkPolicy{Egress: []*atev1.EgressRule{
			{Cidr: "10.0.0.0/8", Ports: []int32{443}}, {Host: "api.example.com"}}},
	}
	if !proto.Equal(got.GetSpec(), want) {
		t.Errorf("got %v\nwant %v", got.GetSpec(), want)
	}
	bad := "name: t\ncontainers:\n- name: c\n  image: oci:/x\nnetwork:\n  egress: {cidr: 10.0.0.0/8}\n"
	if _, err := parseTemplate([]byte(bad), "/base"); err == nil || !strings.Contains(err.Error(), "network.egress must be a list") {
		t.Errorf("egress as a mapping: %v", err)
	}
}
