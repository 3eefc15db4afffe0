package router

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRouteTimeout: an actor that does not answer within its route
// timeout gets the client a 504 saying the request was delivered, and
// its tunnel connection is closed, so the late answer reaches nobody: the
// next request on the router gets its own answer.
func TestRouteTimeout(t *testing.T) {
	upstreamGone := make(chan struct{}, 1)
	tunnel := newTunnel(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
				// The router closed the connection.
				upstreamGone <- struct{}{}
				return
			case <-time.After(3 * time.Second):
			}
		}
		fmt.Fprintf(w, "answer to %s\n", r.URL.Path)
	})
	srv, _ := newRouter(t, Config{}, warmResolver(t, tunnel, Policy{RouteTimeout: 200 * time.Millisecond}))
	start := time.Now()
	got := get(t, srv, "app.default.actors.localhost", "/slow", nil)
	if got.status != http.StatusGatewayTimeout || got.header.Get(HeaderRequestDelivered) != "true" ||
		got.msg != "actor default/app did not answer within its route timeout of 200ms\n" {
		t.Fatalf("got %d %s=%q %q, want 504 with the request delivered", got.status,
			HeaderRequestDelivered, got.header.Get(HeaderRequestDelivered), got.body)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("504 after %s, want about 200ms", took)
	}
	select {
	case <-upstreamGone:
	case <-time.After(5 * time.Second):
		t.Fatal("the tunnel's request was not cancelled: its connection stayed open")
	}
	for i := range 3 {
		path := fmt.Sprintf("/next%d", i)
		if got := get(t, srv, "app.default.actors.localhost", path, nil); got.status != 200 || got.body != "answer to "+path+"\n" {
			t.Fatalf("request after the timeout: %d %q", got.status, got.body)
		}
	}
}

// stuckTransport never sends a request: it waits for the request's end.
type stuckTransport struct{}

func (stuckTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// TestRouteTimeoutUndelivered: a request that never reached the worker
// is reported as such, so the client knows a retry is safe.
func TestRouteTimeoutUndelivered(t *testing.T) {
	cfg := Config{Transport: stuckTransport{}, RouteTimeout: 100 * time.Millisecond}
	srv, _ := newRouter(t, cfg, warmResolver(t, deadAddr(t), Policy{}))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/", strings.NewReader("order"))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "app.default.actors.localhost"
	got := send(srv, req)
	if got.status != http.StatusGatewayTimeout || got.header.Get(HeaderRequestDelivered) != "false" ||
		!strings.Contains(got.body, "route timeout of 100ms") {
		t.Fatalf("got %d %s=%q %q, want 504 with the request not delivered", got.status,
			HeaderRequestDelivered, got.header.Get(HeaderRequestDelivered), got.body)
	}
}

// TestStreamTimeouts: the route timeout ends with the response header, so
// a stream may outlast it as long as it never falls silent for the stream
// idle timeout; one that does is cut, and the client sees an incomplete
// body rather than a clean end.
func TestStreamTimeouts(t *testing.T) {
	tunnel := newTunnel(t, func(w http.ResponseWriter, r *http.Request) {
		gap := 40 * time.Millisecond
		if r.URL.Path == "/stall" {
			gap = 2 * time.Second
		}
		rc := http.NewResponseController(w)
		for i := range 8 {
			if i > 0 {
				select {
				case <-time.After(gap):
				case <-r.Context().Done():
					return
				}
			}
			fmt.Fprintf(w, "chunk %d\n", i)
			if rc.Flush() != nil {
				return
			}
		}
	})
	p := Policy{RouteTimeout: 100 * time.Millisecond, StreamIdleTimeout: 300 * time.Millisecond}
	srv, _ := newRouter(t, Config{}, warmResolver(t, tunnel, p))

	// 8 chunks 40ms apart: 280ms, past the route timeout, never idle.
	got := get(t, srv, "app.default.actors.localhost", "/steady", nil)
	if got.err != nil || got.status != 200 || strings.Count(got.body, "chunk") != 8 {
		t.Fatalf("steady stream: %d %q %v, want all 8 chunks", got.status, got.body, got.err)
	}

	got = get(t, srv, "app.default.actors.localhost", "/stall", nil)
	if got.status != 200 || got.body != "chunk 0\n" || !errors.Is(got.err, io.ErrUnexpectedEOF) {
		t.Fatalf("stalled stream: %d %q %v, want chunk 0 then an unexpected EOF", got.status, got.body, got.err)
	}
}

// TestSSEIsFlushedPerEvent: each Server-Sent Event reaches the client
// before the actor sends the next.
func TestSSEIsFlushedPerEvent(t *testing.T) {
	next := make(chan struct{})
	tunnel := newTunnel(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			if http.NewResponseController(w).Flush() != nil {
				return
			}
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	})
	srv, _ := newRouter(t, Config{}, warmResolver(t, tunnel, Policy{}))
	br := openStream(t, srv, "/events")
	for i := range 3 {
		// The actor holds event i+1 until event i has arrived here.
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		next <- struct{}{}
	}
}
