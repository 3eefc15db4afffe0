package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/testwait"
)

// gateways are two workers' self-service endpoints on loopback, as
// ServeSelfService serves them in their namespaces: "w-attacker" hosting
// uid-a and "w-other" hosting uid-b. Token calls reach a handler that
// counts them per worker, standing for the API server.
type gateways struct {
	attacker, other *slot
	addr            map[string]string // worker → host:port
	metrics         *metrics.Metrics
	mu              sync.Mutex
	minted          map[string]int // worker → token calls that reached the API server
}

func startGateways(t *testing.T, l selfServiceLimits) *gateways {
	t.Helper()
	g := &gateways{attacker: &slot{name: "w-attacker"}, other: &slot{name: "w-other"}, addr: map[string]string{}, minted: map[string]int{},
		metrics: metrics.New()}
	g.attacker.gate.open("uid-a", "c", 8080, 0)
	g.other.gate.open("uid-b", "c", 8080, 0)
	ss := &selfService{log: slog.New(slog.DiscardHandler), limits: l, metrics: g.metrics.Node,
		call: func(_ context.Context, worker, _, _ string, _ []byte) (int, []byte) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.minted[worker]++
			return http.StatusOK, []byte(`{"token":"t"}`)
		}}
	for _, s := range []*slot{g.attacker, g.other} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g.addr[s.name] = ln.Addr().String()
		ss.serveOn(s, ln)
	}
	t.Cleanup(ss.close)
	return g
}

// refused reads ate_node_self_service_refused_total{why}.
func (g *gateways) refused(t *testing.T, why string) float64 {
	t.Helper()
	reg, err := metrics.NewRegistry(g.metrics)
	if err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "ate_node_self_service_refused_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == why {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no ate_node_self_service_refused_total{why=%q}", why)
	return 0
}

func (g *gateways) mintedBy(worker string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.minted[worker]
}

// mint is an actor's POST /v1/token through client, giving up after 5 s.
func (g *gateways) mint(t *testing.T, client *http.Client, s *slot) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.addr[s.name]+"/v1/token", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("mint on %s: %v", s.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("mint on %s: %v", s.name, err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func newActorClient(t *testing.T) *http.Client {
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// readUntilClosed reads c until the server closes it; it fails the test
// when c is still open after within.
func readUntilClosed(t *testing.T, c net.Conn, within time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	b, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection still open after %s; read %q", within, b)
	}
	return string(b)
}

// TestSelfServiceConnectionCap: an actor that opens more connections to
// its gateway than the cap gets the extra ones answered 503, saying why,
// and closed — its token call included, which never reaches the API
// server — while another worker's actor mints as usual; the cap's places
// come back as the actor closes its connections.
func TestSelfServiceConnectionCap(t *testing.T) {
	const maxConns = 4
	// Header timeout long: the cap, not a timeout, must refuse.
	g := startGateways(t, selfServiceLimits{SelfServiceLimits: SelfServiceLimits{MaxConns: maxConns}, readHeaderTimeout: time.Minute})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", g.addr[g.attacker.name])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var held []net.Conn
	for range maxConns {
		held = append(held, dial())
	}
	// Nothing is answered before the request head has come: an HTTP
	// client takes an answer that comes first for an unsolicited one
	// and fails the call instead of reading the 503.
	quiet := func(i int, c net.Conn, what string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection %d over the cap answered before %s: read %d bytes, %v", i+1, what, n, err)
		}
	}
	const head = "POST /v1/token HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n"
	for i := range 3 * maxConns {
		c := dial()
		switch i {
		case 0:
			// Sends nothing: answered once the wait for a head runs out.
			quiet(i, c, "its request")
		case 1:
			// The head's end split across two writes.
			if _, err := io.WriteString(c, head[:len(head)-1]); err != nil {
				t.Fatal(err)
			}
			quiet(i, c, "the end of its request head")
			if _, err := io.WriteString(c, head[len(head)-1:]); err != nil {
				t.Fatal(err)
			}
		default:
			if _, err := io.WriteString(c, head); err != nil {
				t.Fatal(err)
			}
		}
		answer := readUntilClosed(t, c, 5*time.Second)
		if !strings.HasPrefix(answer, "HTTP/1.1 503 ") || !strings.Contains(answer, "holds 4 connections") {
			t.Fatalf("connection %d over the cap answered %q, want a 503 saying the worker holds 4 connections", i+1, answer)
		}
	}
	client := newActorClient(t)
	if code, _, body := g.mint(t, client, g.attacker); code != http.StatusServiceUnavailable || !strings.Contains(body, "the most it may") {
		t.Fatalf("token call over the cap = %d %q, want 503 saying why", code, body)
	}
	if n := g.mintedBy(g.attacker.name); n != 0 {
		t.Fatalf("%d token calls over the cap reached the API server", n)
	}
	if n := g.refused(t, metrics.SelfRefusedConnections); n != 3*maxConns+1 {
		t.Fatalf("ate_node_self_service_refused_total{why=connections} = %v, want %d", n, 3*maxConns+1)
	}
	if code, _, body := g.mint(t, newActorClient(t), g.other); code != http.StatusOK {
		t.Fatalf("another worker's token call while the attacker holds its cap = %d %q, want 200", code, body)
	}
	for _, c := range held {
		c.Close()
	}
	testwait.Until(t, "the attacker's worker answers again once its connections are closed", func() bool {
		code, _, _ := g.mint(t, client, g.attacker)
		return code == http.StatusOK
	})
}

// TestSelfServiceSlowClientsCut: connections that hold a place in the cap
// without sending a request — a header never finished (slowloris), a
// body dripped, a kept-alive connection left idle — are closed by the
// endpoint, and the dripped request never reaches the API server.
func TestSelfServiceSlowClientsCut(t *testing.T) {
	const timeout = 300 * time.Millisecond
	g := startGateways(t, selfServiceLimits{readHeaderTimeout: timeout, readTimeout: 2 * timeout, idleTimeout: timeout})
	for _, tc := range []struct {
		name string
		send string
		// answered: the request was whole, so the API server saw it.
		answered bool
	}{
		{"header never ends", "POST /v1/token HTTP/1.1\r\nHost: gw\r\n", false},
		{"body dripped", "POST /v1/token HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n{", false},
		{"idle after a request", "POST /v1/token HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := g.mintedBy(g.attacker.name)
			c, err := net.Dial("tcp", g.addr[g.attacker.name])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			answer := readUntilClosed(t, c, 3*time.Second)
			if minted := g.mintedBy(g.attacker.name) - before; minted != map[bool]int{true: 1}[tc.answered] {
				t.Fatalf("%d calls reached the API server (answer %q)", minted, answer)
			}
		})
	}
}

// TestSelfServiceRateLimit: an actor minting tokens in a loop gets its
// burst, then 429 with Retry-After and a message saying why, and no more
// calls reach the API server; another worker's actor, and the worker's
// next actor, have budgets of their own.
func TestSelfServiceRateLimit(t *testing.T) {
	const burst = 5
	// A rate so slow that no call is earned back during the test.
	g := startGateways(t, selfServiceLimits{SelfServiceLimits: SelfServiceLimits{Rate: 0.001, Burst: burst}})
	client := newActorClient(t)
	for i := range 4 * burst {
		code, h, body := g.mint(t, client, g.attacker)
		if i < burst {
			if code != http.StatusOK {
				t.Fatalf("call %d within the burst = %d %q", i+1, code, body)
			}
			continue
		}
		retry, err := strconv.Atoi(h.Get("Retry-After"))
		if code != http.StatusTooManyRequests || err != nil || retry < 1 || !strings.Contains(body, "too many self-service calls") {
			t.Fatalf("call %d over the burst = %d, Retry-After %q, %q; want 429, a positive Retry-After and why", i+1, code, h.Get("Retry-After"), body)
		}
	}
	if n := g.mintedBy(g.attacker.name); n != burst {
		t.Fatalf("%d token calls reached the API server, want the burst, %d", n, burst)
	}
	if n := g.refused(t, metrics.SelfRefusedRate); n != 3*burst {
		t.Fatalf("ate_node_self_service_refused_total{why=rate} = %v, want %d", n, 3*burst)
	}
	for i := range burst {
		if code, _, body := g.mint(t, client, g.other); code != http.StatusOK {
			t.Fatalf("another worker's call %d = %d %q, want 200", i+1, code, body)
		}
	}
	g.attacker.gate.close()
	g.attacker.gate.open("uid-a2", "c", 8080, 0)
	if code, _, body := g.mint(t, client, g.attacker); code != http.StatusOK {
		t.Fatalf("the worker's next actor's first call = %d %q, want 200", code, body)
	}
}

// TestSelfServiceLimitsValidate: negative limits are refused at start-up;
// zero takes the defaults.
func TestSelfServiceLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    SelfServiceLimits
		ok   bool
	}{
		{"zero", SelfServiceLimits{}, true},
		{"set", SelfServiceLimits{MaxConns: 8, Rate: 0.5, Burst: 2}, true},
		{"negative conns", SelfServiceLimits{MaxConns: -1}, false},
		{"negative rate", SelfServiceLimits{Rate: -1}, false},
		{"negative burst", SelfServiceLimits{Burst: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.l.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate = %v, want ok %v", err, tc.ok)
			}
		})
	}
	d := selfServiceLimits{}.withDefaults()
	if d.MaxConns != DefaultSelfServiceMaxConns || d.Rate != DefaultSelfServiceRate || d.Burst != DefaultSelfServiceBurst {
		t.Fatalf("defaults = %+v", d.SelfServiceLimits)
	}
}
