package node

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/tunnelproto"
)

// TestTunnelErrorNamesNoCause: when the actor does not answer (here:
// nothing listens on its traffic port, the first one listed, while the
// app and its wakeup probe use the second), the tunnel answers 502 with
// the marker the router replaces and a fixed text, not the dial error
// with its ports, worker and runtime names.
func TestTunnelErrorNamesNoCause(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	w := n.order[0]
	spec := template("img1")
	spec.Containers[0].Ports = []int32{8080, 8081}
	spec.Containers[0].Env = map[string]string{"PORT": "8081"}
	spec.WakeupProbe = &atev1.Probe{HttpGet: &atev1.HTTPGetAction{Path: "/healthz", Port: 8081}}
	if err := n.Start(t.Context(), StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: spec}); err != nil {
		t.Fatal(err)
	}
	tunnel := httptest.NewServer(n.NewTunnel())
	defer tunnel.Close()

	resp, body := tunnelGet(t, tunnel.URL, w, "a", "/")
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(tunnelproto.HeaderError) != string(tunnelproto.KindRefused) ||
		string(body) != "actor did not answer\n" {
		t.Fatalf("got %d %s=%q %q, want 502 %s=%s %q", resp.StatusCode, tunnelproto.HeaderError,
			resp.Header.Get(tunnelproto.HeaderError), body, tunnelproto.HeaderError, string(tunnelproto.KindRefused), "actor did not answer\n")
	}
	for _, leak := range []string{w, "8080", "fake", "refused", "dial"} {
		if strings.Contains(string(body), leak) {
			t.Errorf("body %q names %q", body, leak)
		}
	}
}

// TestTunnelStripsActorsMarker: an actor cannot send the tunnel's
// markers: the error marker would make the router replace its answer,
// and a 421 with the not-serving mark would make routers park the
// requests of every actor on its node.
func TestTunnelStripsActorsMarker(t *testing.T) {
	_, w, url := startedTunnel(t)
	for _, c := range []struct{ header, value, status string }{
		{tunnelproto.HeaderError, string(tunnelproto.KindCut), "200"},
		{tunnelproto.HeaderNotServing, "1", "421"},
	} {
		resp, _ := tunnelGet(t, url, w, "a", "/header?name="+c.header+"&value="+c.value+"&status="+c.status)
		if strconv.Itoa(resp.StatusCode) != c.status || resp.Header.Get(c.header) != "" {
			t.Errorf("actor's %s %s: got %d with %s=%q, want its status without the marker", c.status, c.header, resp.StatusCode, c.header, resp.Header.Get(c.header))
		}
	}
}

// TestStopCutsLikeACheckpoint: requests still running when an actor's
// sandbox is stopped on purpose (revert, forced delete) are answered as
// cut — 503, retry — not as if the app had failed.
func TestStopCutsLikeACheckpoint(t *testing.T) {
	n := newTestNode(t, fake.New(fake.Config{}))
	w := n.order[0]
	if err := n.Start(t.Context(), StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	if _, cut := n.cutState(w); cut {
		t.Fatal("a running actor's requests count as cut")
	}
	if err := n.Stop(t.Context(), w, "a"); err != nil {
		t.Fatal(err)
	}
	if _, cut := n.cutState(w); !cut {
		t.Fatal("requests cut by Stop would be answered 502, not 503 + Retry-After")
	}
}
