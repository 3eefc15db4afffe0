package router

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"substrate.dev/ate/internal/testwait"
)

// echoBodyTunnel streams each request body back as it arrives.
func echoBodyTunnel(t *testing.T) string {
	return newTunnel(t, func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		buf := make([]byte, 1024)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				_, _ = w.Write(buf[:n])
				_ = rc.Flush()
			}
			if err != nil {
				return
			}
		}
	})
}

// h2cClient speaks HTTP/2 without TLS (prior knowledge).
func h2cClient(t *testing.T) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestRequestBodyStreamsBothWays converses with an actor over one request:
// each line of the request body is echoed back before the next is sent,
// which a proxy that buffers either body would deadlock on. Over HTTP/1.1
// and HTTP/2 (h2c) to the router.
func TestRequestBodyStreamsBothWays(t *testing.T) {
	tr := NewTunnelTransport()
	defer tr.CloseIdleConnections()
	h := NewHandler(Config{Transport: tr}, warmResolver(t, echoBodyTunnel(t), Policy{}), nil)
	s, _ := startServer(t, h)
	h1 := &http.Client{Transport: NewTunnelTransport()}
	defer h1.CloseIdleConnections()
	for name, client := range map[string]*http.Client{"http1": h1, "h2c": h2cClient(t)} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			pr, pw := io.Pipe()
			defer pw.Close()
			// A proxy that buffers deadlocks this test: end it then.
			context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.Addr()+"/echo", pr)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "app.default.actors.localhost"
			// The first line goes out before the response can start.
			go func() { _, _ = io.WriteString(pw, "line 0\n") }()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if want := map[string]int{"http1": 1, "h2c": 2}[name]; resp.ProtoMajor != want {
				t.Errorf("client spoke HTTP/%d, want HTTP/%d", resp.ProtoMajor, want)
			}
			br := bufio.NewReader(resp.Body)
			for i := range 3 {
				if i > 0 {
					if _, err := fmt.Fprintf(pw, "line %d\n", i); err != nil {
						t.Fatal(err)
					}
				}
				if got, err := br.ReadString('\n'); err != nil || got != fmt.Sprintf("line %d\n", i) {
					t.Fatalf("echo of line %d: %q %v", i, got, err)
				}
			}
		})
	}
}

// TestWebSocket: an upgrade passes through the router both ways, and an
// upgraded connection silent for the stream idle timeout is closed.
func TestWebSocket(t *testing.T) {
	tunnel := newTunnel(t, wsEcho)
	srv, h := newRouter(t, Config{}, warmResolver(t, tunnel, Policy{StreamIdleTimeout: 300 * time.Millisecond}))
	ws := dialWebSocket(t, srv.Listener.Addr().String(), "default/app")
	defer func() { _ = ws.CloseNow() }()
	echo(t, ws, "hello")
	echo(t, ws, "again")
	if n := h.InFlight(); n != 1 {
		t.Errorf("in flight with a WebSocket open: %d, want 1", n)
	}
	// Silence: the router closes the connection.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, got, err := ws.Read(ctx)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent WebSocket: %q %v, want it closed by the router", got, err)
	}
	testwait.Until(t, "the upgraded request to end", func() bool { return h.InFlight() == 0 })
}
