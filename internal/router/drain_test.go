package router

import (
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/testwait"
)

// TestDrain: once Start's context ends, /readyz answers 503 at once (and
// Ready, the management listener's /readyz, says draining) while
// /healthz and actors are still served for DrainDelay; then the listener
// closes, and Start returns only after the parked request and the open
// WebSocket have finished, every one answered.
func TestDrain(t *testing.T) {
	ws := newTunnel(t, wsEcho)
	warm := echoTunnel(t, "warm", nil)
	release := make(chan struct{})
	res := drainResolver(t, ws, warm, release)
	tr := NewTunnelTransport()
	defer tr.CloseIdleConnections()
	h := NewHandler(Config{Transport: tr}, res, nil)
	s := httpserve.NewServer("router", "127.0.0.1:0", h, nil)
	s.DrainDelay, s.DrainTimeout = 300*time.Millisecond, 10*time.Second
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	started := make(chan error, 1)
	go func() { started <- s.Start(ctx) }()
	client := &http.Client{Transport: NewTunnelTransport()}
	defer client.CloseIdleConnections()
	getStatus := func(host, path string) int {
		code, _, err := serverGet(t.Context(), client, s.Addr(), host, path)
		if err != nil {
			t.Errorf("GET %s%s: %v", host, path, err)
		}
		return code
	}

	conn := dialWebSocket(t, s.Addr(), "default/ws")
	defer func() { _ = conn.CloseNow() }()
	parked := make(chan int, 1)
	go func() { parked <- getStatus("parked.default.actors.localhost", "/") }()
	testwait.Until(t, "the request to park", func() bool { return h.act.flights.Waiting() == 1 })

	if err := h.Ready(); err != nil {
		t.Fatalf("Ready before the drain: %v", err)
	}
	stop()
	testwait.Until(t, "/readyz to answer 503", func() bool { return getStatus("localhost", "/readyz") == http.StatusServiceUnavailable })
	// What the management listener's /readyz (readiness probes) reports.
	if err := h.Ready(); !errors.Is(err, ErrDraining) {
		t.Errorf("Ready while draining: %v, want ErrDraining", err)
	}
	if code := getStatus("localhost", "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while draining: %d, want 200", code)
	}
	if code := getStatus("warm.default.actors.localhost", "/"); code != http.StatusOK {
		t.Errorf("request during the drain delay: %d, want 200", code)
	}
	testwait.Until(t, "the listener to close", func() bool {
		c, err := net.Dial("tcp", s.Addr())
		if err == nil {
			_ = c.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	})
	// Still in flight: both keep working and Start waits for them.
	echo(t, conn, "still there")
	close(release)
	if code := <-parked; code != http.StatusOK {
		t.Errorf("parked request: %d, want 200", code)
	}
	// http.Server.Shutdown is done now; the WebSocket must still work.
	testwait.Until(t, "the parked request to end", func() bool { return h.InFlight() == 1 })
	echo(t, conn, "after the parked request")
	select {
	case err := <-started:
		t.Fatalf("Start returned %v with a WebSocket open", err)
	default:
	}
	_ = conn.CloseNow()
	if err := <-started; err != nil {
		t.Errorf("Start returned %v", err)
	}
}

// drainResolver serves actor "ws" on tunnel ws and "warm" on warm, both
// RUNNING; any other actor is suspended and resumes (onto warm) once
// release is closed.
func drainResolver(t *testing.T, ws, warm string, release <-chan struct{}) *fakeResolver {
	return &fakeResolver{t: t,
		lookup: func(_ context.Context, key names.ActorKey) (Target, bool, error) {
			switch key.Name {
			case "ws":
				return targetAt(key, "w1", ws), true, nil
			case "warm":
				return targetAt(key, "w2", warm), true, nil
			}
			return Target{}, false, nil
		},
		resume: resumeOnRelease(release, "w3", warm),
	}
}

// wsEcho is a WebSocket server that echoes every message back.
func wsEcho(w http.ResponseWriter, r *http.Request) {
	// The Origin is the test client's, not this server's.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer func() { _ = c.CloseNow() }()
	for {
		typ, b, err := c.Read(r.Context())
		if err != nil {
			return
		}
		if err := c.Write(r.Context(), typ, b); err != nil {
			return
		}
	}
}

// dialWebSocket opens a WebSocket to actor's /ws through the router at addr.
// Close it with CloseNow: the tests end connections without a handshake.
func dialWebSocket(t *testing.T, addr, actor string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{HeaderTargetActor: {actor}, "Origin": {"http://localhost/"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func echo(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.Read(ctx); err != nil || string(got) != msg {
		t.Fatalf("echo of %q: %q %v", msg, got, err)
	}
}
