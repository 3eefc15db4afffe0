package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// readEvents reads Server-Sent Events ("id: i" / "data: event i") and
// returns their data with when each arrived, and the error that ended the
// stream (nil at a clean end).
func readEvents(body io.Reader) (data []string, at []time.Time, err error) {
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
			at = append(at, time.Now())
		}
	}
	return data, at, sc.Err()
}

// h2cClient speaks HTTP/2 without TLS (prior knowledge), as h2c clients
// and gRPC-style proxies do.
func h2cClient(t *testing.T) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// TestRouterStreaming: through the real router and tunnel to a real
// actor, Server-Sent Events arrive one by one and intact across gaps of
// more than a second, a request body streams to the actor while its
// echo streams back (HTTP/1.1 and HTTP/2 cleartext), and HTTP/2 clients
// are served.
func TestRouterStreaming(t *testing.T) {
	in := startUp(t, 2, "--demo")
	in.mustCount("default/counter-1", 1)
	h1 := &http.Client{Timeout: time.Minute}

	t.Run("sse 100 events", func(t *testing.T) {
		// Events 40 and 80 come 1.1 s after the one before.
		req := in.newRequest(t.Context(), http.MethodGet, "default/counter-1", "/sse?n=100&gap=5&every=40&slow=1100", nil)
		start := time.Now()
		resp, err := h1.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("got %d %q", resp.StatusCode, ct)
		}
		data, at, err := readEvents(resp.Body)
		if err != nil || len(data) != 100 {
			t.Fatalf("got %d events, err %v; want 100 and a clean end", len(data), err)
		}
		for i, d := range data {
			if d != fmt.Sprintf("event %d", i+1) {
				t.Fatalf("event %d is %q", i+1, d)
			}
		}
		// Flushed as sent: event 39 arrived more than a second before
		// event 40, and the first long before the end.
		if gap := at[39].Sub(at[38]); gap < time.Second {
			t.Errorf("events 39 and 40 arrived %s apart, want ≥1s (buffered?)", gap)
		}
		if early := at[len(at)-1].Sub(at[0]); early < 2*time.Second {
			t.Errorf("first event only %s before the last (stream took %s): not streamed", early, time.Since(start))
		}
	})

	t.Run("duplex http1", func(t *testing.T) { duplexEcho(t, in, h1, 1) })
	t.Run("duplex h2c", func(t *testing.T) { duplexEcho(t, in, h2cClient(t), 2) })

	t.Run("h2c GET", func(t *testing.T) {
		resp, err := h2cClient(t).Do(in.newRequest(t.Context(), http.MethodGet, "default/counter-1", "/", nil))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 || !strings.HasPrefix(string(b), "count=") ||
			resp.Header.Get("Ate-Activation") != "warm" {
			t.Fatalf("got %d over HTTP/%d %q activation %q", resp.StatusCode, resp.ProtoMajor, b, resp.Header.Get("Ate-Activation"))
		}
	})
}

// duplexEcho converses with counter-1's /echo over one request, speaking
// HTTP/proto to the router: each line comes back before the next is sent.
func duplexEcho(t *testing.T, in *installation, client *http.Client, proto int) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	defer pw.Close()
	// A buffering hop deadlocks the conversation: end it then.
	context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	req := in.newRequest(ctx, http.MethodPost, "default/counter-1", "/echo", pr)
	go func() { _, _ = io.WriteString(pw, "line 0\n") }()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != proto || resp.StatusCode != 200 {
		t.Fatalf("got %d over HTTP/%d, want 200 over HTTP/%d", resp.StatusCode, resp.ProtoMajor, proto)
	}
	br := bufio.NewReader(resp.Body)
	for i := range 5 {
		if i > 0 {
			if _, err := fmt.Fprintf(pw, "line %d\n", i); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := br.ReadString('\n'); err != nil || got != fmt.Sprintf("line %d\n", i) {
			t.Fatalf("echo of line %d: %q %v", i, got, err)
		}
	}
}

// TestRouterTimeouts: a template's route timeout (1 s here) answers a slow
// actor 504 saying the request was delivered, and no one ever receives
// its late reply; it does not cut a stream that keeps talking, while the
// stream idle timeout (1 s) cuts one that falls silent.
func TestRouterTimeouts(t *testing.T) {
	in := startUp(t, 2)
	in.counterTemplate("timeouts", nil, "routeTimeoutSeconds: 1\nstreamIdleTimeoutSeconds: 1\n")
	in.ate("create", "actor", "slow", "--template", "timeouts")
	in.mustCount("default/slow", 1)

	start := time.Now()
	code, body, hdr, err := in.request(http.MethodGet, "default/slow", "/sleep?ms=2500&tag=late", "")
	if err != nil || code != http.StatusGatewayTimeout || hdr.Get("Ate-Request-Delivered") != "true" ||
		!strings.Contains(body, "route timeout of 1s") {
		t.Fatalf("slow request: %d %q delivered=%q %v; want 504, delivered", code, body, hdr.Get("Ate-Request-Delivered"), err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("504 after %s, want about 1s", took)
	}
	// Until well after the late reply was due, every request gets its own.
	for i := 0; time.Since(start) < 3500*time.Millisecond; i++ {
		tag := fmt.Sprint(i)
		code, body, _, err := in.request(http.MethodGet, "default/slow", "/sleep?ms=50&tag="+tag, "")
		if err != nil || code != 200 || strings.TrimSpace(body) != "slept 50 ms tag="+tag {
			t.Fatalf("request %d after the timeout: %d %q %v", i, code, body, err)
		}
	}

	t.Run("stream outlives the route timeout", func(t *testing.T) {
		resp, err := httpClient.Do(in.newRequest(t.Context(), http.MethodGet, "default/slow", "/sse?n=4&gap=600", nil))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if data, _, err := readEvents(resp.Body); err != nil || len(data) != 4 {
			t.Fatalf("got %v, %v; want 4 events over 1.8s", data, err)
		}
	})
	t.Run("silent stream is cut", func(t *testing.T) {
		resp, err := httpClient.Do(in.newRequest(t.Context(), http.MethodGet, "default/slow", "/sse?n=3&gap=3000", nil))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, at, err := readEvents(resp.Body)
		if len(data) != 1 || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("got %v, %v; want 1 event, then the stream cut (unexpected EOF)", data, err)
		}
		if cut := time.Since(at[0]); cut > 2500*time.Millisecond {
			t.Errorf("cut %s after the last event, want about 1s", cut)
		}
	})
}

// TestRouterWebSocketAcrossSuspend: a WebSocket echo works through the
// router; suspending the actor ends the connection (it does not hang),
// and a reconnect resumes the actor and echoes again.
func TestRouterWebSocketAcrossSuspend(t *testing.T) {
	in := startUp(t, 2)
	// A short drain grace: the open WebSocket holds the suspend that long.
	in.counterTemplate("ws", nil, "drainGraceSeconds: 1\n")
	in.ate("create", "actor", "ws-1", "--template", "ws")
	ws, err := in.dialWS("default/ws-1")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := wsEcho(ws, "before"); err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	waitFor(t, "the open connection's activity to be recorded", 10*time.Second, func() bool {
		la := in.actor("ws-1").GetLastActivity()
		return la != nil && !la.AsTime().Before(opened.Add(-time.Second))
	})
	resumes := in.actor("ws-1").GetResumes()

	closed := make(chan error, 1)
	go func() {
		var msg string
		closed <- websocketReceive(ws, &msg)
	}()
	in.ate("suspend", "actor", "ws-1")
	suspended := time.Now()
	select {
	case err := <-closed:
		if err == nil {
			t.Fatal("received a message from a suspended actor")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the WebSocket to the suspended actor is still open 10s later")
	}
	in.wantState("ws-1", atev1.ActorState_SUSPENDED)
	t.Logf("WebSocket closed %s after the suspend returned", time.Since(suspended))

	ws2, err := in.dialWS("default/ws-1")
	if err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	defer ws2.Close()
	if err := wsEcho(ws2, "after"); err != nil {
		t.Fatal(err)
	}
	if a := in.actor("ws-1"); a.GetState() != atev1.ActorState_RUNNING || a.GetResumes() != resumes+1 {
		t.Errorf("after reconnecting: %s with %d resumes, want RUNNING with %d", a.GetState(), a.GetResumes(), resumes+1)
	}
}
