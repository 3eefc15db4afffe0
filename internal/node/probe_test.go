package node

import (
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/sandbox/fake"
)

// TestProbePathKeepsQuery: a wakeup probe path with a query string is sent
// as path and query, not as one escaped path (which the fake, like the
// counter, answers 404 to).
func TestProbePathKeepsQuery(t *testing.T) {
	n := newTestNode(t, fake.New(fake.Config{}))
	spec := template("img1")
	spec.WakeupProbe = &atev1.Probe{HttpGet: &atev1.HTTPGetAction{Path: "/healthz?ready=1", Port: 8080}, TimeoutSeconds: 2}
	if err := n.Start(t.Context(), StartRequest{Worker: n.order[0], ActorUID: "a", Atespace: "ns", Name: "a", Spec: spec}); err != nil {
		t.Fatalf("start with probe path /healthz?ready=1: %v", err)
	}
}
