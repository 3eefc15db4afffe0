package node

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/tunnelproto"
)

// openTo returns how many connections into container are open.
func openTo(n *Node, container string) int {
	return len(n.open.members(container))
}

// TestFirstRequestReusesProbeConnection: the wakeup probe's connection
// stays pooled, the first request through the tunnel reuses it instead of
// dialing again, and every connection into a container is closed once
// the container is gone.
func TestFirstRequestReusesProbeConnection(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	w := n.order[0]
	spec := template("img1")
	spec.WakeupProbe = &atev1.Probe{HttpGet: &atev1.HTTPGetAction{Path: "/healthz", Port: 8080}}
	if err := n.Start(t.Context(), StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: spec}); err != nil {
		t.Fatal(err)
	}
	s := n.slots[w]
	s.mu.Lock()
	container := s.containerID
	s.mu.Unlock()
	if got := openTo(n, container); got != 1 {
		t.Fatalf("connections after the probe = %d, want 1 (the probe's, pooled)", got)
	}

	tunnel := httptest.NewServer(n.NewTunnel())
	defer tunnel.Close()
	for i := range 3 {
		resp, body := tunnelGet(t, tunnel.URL, w, "a", "/")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		if got := openTo(n, container); got != 1 {
			t.Fatalf("connections after request %d = %d, want 1: the request dialed instead of reusing the probe's", i, got)
		}
	}

	if err := n.Stop(t.Context(), w, "a"); err != nil {
		t.Fatal(err)
	}
	if got := openTo(n, container); got != 0 {
		t.Fatalf("connections into a stopped container = %d, want 0", got)
	}
}

// tunnelGet sends GET path through the tunnel at url for actor uid on
// worker and returns the response (its body read and closed).
func tunnelGet(t *testing.T, url, worker, uid, path string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(tunnelproto.HeaderWorker, worker)
	req.Header.Set(tunnelproto.HeaderActorUID, uid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}
