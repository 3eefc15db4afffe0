package node

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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
	return startedTunnelOn(t, fake.New(fake.Config{}))
}

// startedTunnelOn is startedTunnel with the sandbox runtime rt.
func startedTunnelOn(t *testing.T, rt *fake.Runtime) (*Node, string, string) {
	t.Helper()
	n := newTestNode(t, rt)
	w := n.order[0]
	if err := n.Start(t.Context(), StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	tunnel := httptest.NewServer(n.NewTunnel())
	t.Cleanup(tunnel.Close)
	return n, w, tunnel.URL
}

// TestTunnelWithholdsAnAnswerGivenPastTheLease: a request admitted
// within the node's lease whose actor answers only after the lease ran
// out gets 421 with the not-serving mark, as a request refused at
// admission would, and not the actor's answer: by then a replica may
// have declared the node lost and restored the actor elsewhere, and
// that answer would come from the copy being abandoned.
func TestTunnelWithholdsAnAnswerGivenPastTheLease(t *testing.T) {
	for _, c := range []struct {
		name       string
		lapse      bool
		status     int
		notServing bool
	}{
		{"answered within the lease", false, http.StatusOK, false},
		{"answered after the lease ran out", true, tunnelproto.StatusStale, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			hold, arrived := make(chan struct{}), make(chan struct{})
			n, w, url := startedTunnelOn(t, fake.New(fake.Config{Hold: hold, Arrived: arrived}))
			n.ExtendLease(time.Now().Add(time.Hour))
			type answer struct {
				resp *http.Response
				body []byte
			}
			got := make(chan answer, 1)
			go func() {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/held", nil)
				req.Header.Set(tunnelproto.HeaderWorker, w)
				req.Header.Set(tunnelproto.HeaderActorUID, "a")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					got <- answer{}
					return
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				got <- answer{resp, body}
			}()
			<-arrived // admitted: the actor has the request
			if c.lapse {
				past := time.Now().Add(-time.Second)
				n.lease.Store(&past)
			}
			close(hold)
			a := <-got
			if a.resp == nil {
				return
			}
			if a.resp.StatusCode != c.status || (a.resp.Header.Get(tunnelproto.HeaderNotServing) != "") != c.notServing {
				t.Errorf("%d %q (not-serving mark %q), want %d, mark %t", a.resp.StatusCode, a.body,
					a.resp.Header.Get(tunnelproto.HeaderNotServing), c.status, c.notServing)
			}
			if c.lapse && strings.Contains(string(a.body), "count=") {
				t.Errorf("the actor's answer given past the lease reached the client: %q", a.body)
			}
		})
	}
}

// TestTunnelCutsAnUpgradedConnectionPastTheLease: an upgraded
// connection (a WebSocket's) opened within the lease passes the actor's
// bytes on while the node serves, and is cut, passing nothing more on,
// once the lease has run out.
func TestTunnelCutsAnUpgradedConnectionPastTheLease(t *testing.T) {
	n, w, url := startedTunnel(t)
	n.ExtendLease(time.Now().Add(time.Hour))
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A bound, not a wait: a connection left open fails the test
	// instead of hanging it.
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET /echo HTTP/1.1\r\nHost: a\r\nUpgrade: echo\r\nConnection: Upgrade\r\n%s: %s\r\n%s: a\r\n\r\n",
		tunnelproto.HeaderWorker, w, tunnelproto.HeaderActorUID)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v; want 101", resp, err)
	}
	if _, err := io.WriteString(conn, "one\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "one\n" {
		t.Fatalf("within the lease: %q, %v; want the echo", line, err)
	}
	past := time.Now().Add(-time.Second)
	n.lease.Store(&past)
	_, _ = io.WriteString(conn, "two\n")
	if line, err := br.ReadString('\n'); err == nil || line == "two\n" {
		t.Fatalf("past the lease: %q, %v; want the connection cut, nothing passed on", line, err)
	}
}

// TestServingBodyEndsWhenTheNodeStopsServing: a streamed answer passes
// on what the actor sent while the node served, and ends with an error,
// passing nothing more on, once it does not.
func TestServingBodyEndsWhenTheNodeStopsServing(t *testing.T) {
	pr, pw := io.Pipe()
	var serving atomic.Bool
	serving.Store(true)
	b := &servingBody{ReadCloser: pr, serving: serving.Load}
	buf := make([]byte, 64)
	go func() { _, _ = pw.Write([]byte("event: 1\n\n")) }()
	if n, err := b.Read(buf); err != nil || string(buf[:n]) != "event: 1\n\n" {
		t.Fatalf("while serving: %q, %v", buf[:n], err)
	}
	serving.Store(false)
	go func() { _, _ = pw.Write([]byte("event: 2\n\n")) }()
	if n, err := b.Read(buf); !errors.Is(err, errPastLease) || n != 0 {
		t.Fatalf("past the lease: %q, %v; want nothing and errPastLease", buf[:n], err)
	}
	_ = pw.Close()
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
