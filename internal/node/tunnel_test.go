package node

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

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

// TestTunnelSaysWhenTheNodeServesNothing: past its lease the node
// refuses every request 421 and says the whole node is in question
// (tunnelproto.HeaderNotServing), so the router parks its requests
// instead of resolving the same worker again; an ordinary stale
// assignment carries no such mark.
func TestTunnelSaysWhenTheNodeServesNothing(t *testing.T) {
	n, w, url := startedTunnel(t)
	for _, c := range []struct {
		name       string
		uid        string
		lease      time.Duration // from now; 0: none kept
		status     int
		notServing bool
	}{
		{"within the lease", "a", time.Hour, http.StatusOK, false},
		{"another actor's uid", "b", time.Hour, tunnelproto.StatusStale, false},
		{"past the lease", "a", -time.Second, tunnelproto.StatusStale, true},
	} {
		n.lease.Store(nil) // ExtendLease only moves it later
		n.ExtendLease(time.Now().Add(c.lease))
		resp, body := tunnelGet(t, url, w, c.uid, "/")
		if resp.StatusCode != c.status || (resp.Header.Get(tunnelproto.HeaderNotServing) != "") != c.notServing {
			t.Errorf("%s: %d %q (%s %q), want %d, not-serving mark %t", c.name, resp.StatusCode, body,
				tunnelproto.HeaderNotServing, resp.Header.Get(tunnelproto.HeaderNotServing), c.status, c.notServing)
		}
	}
}

// startedTunnel starts actor "a" on a fresh test node's first worker and
// serves the node's tunnel; it returns the node, the worker and the
// tunnel's URL.
func startedTunnel(t *testing.T) (*Node, string, string) {
	t.Helper()
	n := newTestNode(t, fake.New(fake.Config{}))
	w := n.order[0]
	if err := n.Start(t.Context(), StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	tunnel := httptest.NewServer(n.NewTunnel())
	t.Cleanup(tunnel.Close)
	return n, w, tunnel.URL
}

// TestStartRefusedPastTheLease: a node past its lease starts no sandbox
// (ErrNotServing, which the API server takes as "place it elsewhere"):
// one started there could only answer 421 until the lease came back,
// while a replica may be declaring the node lost. Within the lease, the
// same start runs.
func TestStartRefusedPastTheLease(t *testing.T) {
	n := newTestNode(t, fake.New(fake.Config{}))
	w := n.order[0]
	req := StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}
	n.ExtendLease(time.Now().Add(-time.Second))
	if err := n.Start(t.Context(), req); !errors.Is(err, ErrNotServing) {
		t.Fatalf("start past the lease: %v, want ErrNotServing", err)
	}
	if hosted, err := n.HostedActors(t.Context()); err != nil || len(hosted) != 0 {
		t.Fatalf("hosted after a refused start: %v, %v; want none", hosted, err)
	}
	n.ExtendLease(time.Now().Add(time.Hour))
	if err := n.Start(t.Context(), req); err != nil {
		t.Fatalf("start within the lease: %v", err)
	}
}
