package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// sseStream is a listening stream (a GET for Server-Sent Events) opened
// through the router, as an MCP client's notification stream is: the
// counter's /sse sends an event every gap, standing in for an MCP
// server's keep-alive pings.
type sseStream struct {
	// header is closed once the response header came (resp set).
	header chan struct{}
	resp   *http.Response
	// ended is closed once the stream ended: err nil is a clean end
	// (io.EOF), anything else a broken one; events counts the events
	// read, endedAt is when it ended.
	ended   chan struct{}
	err     error
	events  atomic.Int64
	endedAt time.Time
	cancel  context.CancelFunc
}

// openSSE opens a listening stream to actor's /sse with an event every
// gap over HTTP/1.1, and reads it in the background until it ends.
func (in *installation) openSSE(actor string, gap time.Duration) *sseStream {
	return in.openSSEWith(http.DefaultClient, actor, gap)
}

// openSSEWith is openSSE through client (without a timeout: the stream
// lives as long as the test wants).
func (in *installation) openSSEWith(client *http.Client, actor string, gap time.Duration) *sseStream {
	in.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	in.t.Cleanup(cancel)
	s := &sseStream{header: make(chan struct{}), ended: make(chan struct{}), cancel: cancel}
	req := in.newRequest(ctx, http.MethodGet, actor, fmt.Sprintf("/sse?n=1000000&gap=%d", gap.Milliseconds()), nil)
	req.Header.Set("Accept", "text/event-stream")
	go func() {
		defer close(s.ended)
		resp, err := client.Do(req)
		if err != nil {
			s.err, s.endedAt = err, time.Now()
			close(s.header)
			return
		}
		s.resp = resp
		close(s.header)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				s.events.Add(1)
			}
		}
		s.err, s.endedAt = sc.Err(), time.Now()
	}()
	return s
}

// isOpen reports whether the stream has not ended.
func (s *sseStream) isOpen() bool {
	select {
	case <-s.ended:
		return false
	default:
		return true
	}
}

// TestLongLivedStreams: issue 21's long-lived streams, with the counter's
// SSE endpoint as the server and a Go SSE client (an MCP client keeps
// such a stream open, and its server pings on it).
//
//   - streams.idle: ignore lets the idle policy suspend an actor with an
//     open listening stream carrying only the server's events, after
//     idle.after; the suspend ends the stream cleanly. Without it
//     (the default) the stream keeps the actor RUNNING.
//   - A manual suspend ends an open listening stream cleanly (the client
//     reads the end of the response, no error, over HTTP/1.1 and HTTP/2)
//     before the suspend finishes, with a drain grace of an hour that the
//     suspend would otherwise wait out.
//   - streams.wakeOn: request: a listening stream to a suspended actor is
//     held without resuming it, until a real request resumes it; then the
//     stream is served by the actor.
func TestLongLivedStreams(t *testing.T) {
	const after = 2 * time.Second
	in := startUp(t, 2)
	in.counterTemplate("listen-count", nil, "idle: {after: 2s}\n")
	in.counterTemplate("listen-ignore", nil, "idle: {after: 2s}\nstreams: {idle: ignore}\n")
	in.counterTemplate("listen-grace", nil, "drainGraceSeconds: 3600\n")
	in.counterTemplate("listen-hold", nil, "streams: {wakeOn: request}\n")

	t.Run("ignored stream lets the actor sleep", func(t *testing.T) {
		in.ate("create", "actor", "ignore-1", "--template", "listen-ignore")
		in.mustCount("default/ignore-1", 1)
		s := in.openSSE("default/ignore-1", 500*time.Millisecond)
		waitFor(t, "the actor to be suspended with its stream open", 30*time.Second, func() bool {
			return in.state("ignore-1") == atev1.ActorState_SUSPENDED
		})
		waitFor(t, "the stream to end", 10*time.Second, func() bool { return !s.isOpen() })
		if s.err != nil || s.events.Load() == 0 {
			t.Fatalf("stream ended with %v after %d events, want a clean end after some", s.err, s.events.Load())
		}
	})

	t.Run("counted stream keeps the actor awake", func(t *testing.T) {
		in.ate("create", "actor", "count-1", "--template", "listen-count")
		in.mustCount("default/count-1", 1)
		s := in.openSSE("default/count-1", 500*time.Millisecond)
		<-s.header
		opened := time.Now()
		elapsedAtLeast(t, "3×idle.after with the stream open", opened, 3*after)
		if st := in.state("count-1"); st != atev1.ActorState_RUNNING || !s.isOpen() {
			t.Fatalf("after 3×idle.after with a stream open: %s, stream open %t; want RUNNING and open", st, s.isOpen())
		}
		s.cancel()
		waitFor(t, "the actor to be suspended once the stream closed", 30*time.Second, func() bool {
			return in.state("count-1") == atev1.ActorState_SUSPENDED
		})
	})

	// A reset shows as an error on either protocol: "unexpected EOF" in
	// HTTP/1.1's chunked body, a stream error (RST_STREAM) on HTTP/2.
	h2c := h2cClient(t)
	h2c.Timeout = 0
	for _, proto := range []struct {
		name   string
		client *http.Client
	}{{"http1", http.DefaultClient}, {"h2c", h2c}} {
		t.Run("suspend ends the stream cleanly without waiting the grace/"+proto.name, func(t *testing.T) {
			actor := "grace-" + proto.name
			in.ate("create", "actor", actor, "--template", "listen-grace")
			in.mustCount("default/"+actor, 1)
			ended0 := sample(t, in.scrape(), "ate_node_streams_ended_total", nil)
			s := in.openSSEWith(proto.client, "default/"+actor, 200*time.Millisecond)
			<-s.header
			waitFor(t, "an event", 10*time.Second, func() bool { return s.events.Load() > 0 || !s.isOpen() })
			if s.resp == nil || s.resp.ProtoMajor != map[string]int{"http1": 1, "h2c": 2}[proto.name] {
				t.Fatalf("stream response %v (%v), want it over %s", s.resp, s.err, proto.name)
			}
			in.ate("suspend", "actor", actor)
			suspended := time.Now()
			in.wantState(actor, atev1.ActorState_SUSPENDED)
			waitFor(t, "the stream to end", 10*time.Second, func() bool { return !s.isOpen() })
			if s.err != nil {
				t.Fatalf("stream ended with %v, want a clean end of the response", s.err)
			}
			if s.endedAt.After(suspended) {
				t.Errorf("stream ended %s after the suspend returned, want before", s.endedAt.Sub(suspended))
			}
			if n := sample(t, in.scrape(), "ate_node_streams_ended_total", nil); n != ended0+1 {
				t.Errorf("ate_node_streams_ended_total went from %v to %v, want one more", ended0, n)
			}
			in.mustCount("default/"+actor, 2) // resumed with its memory
		})
	}

	t.Run("held stream waits for a real request", func(t *testing.T) {
		in.ate("create", "actor", "hold-1", "--template", "listen-hold")
		in.mustCount("default/hold-1", 1)
		in.ate("suspend", "actor", "hold-1")
		in.wantState("hold-1", atev1.ActorState_SUSPENDED)
		resumes := func() float64 {
			return sample(t, in.scrape(), "ate_lifecycle_resumes_total", map[string]string{"outcome": "ok"})
		}
		before := resumes()
		s := in.openSSE("default/hold-1", 200*time.Millisecond)
		waitFor(t, "the stream to be held", 10*time.Second, func() bool {
			return sample(t, in.scrape(), "ate_router_held_streams", nil) == 1
		})
		held := time.Now()
		elapsedAtLeast(t, "a held stream's observation window", held, 3*time.Second)
		select {
		case <-s.header:
			t.Fatalf("held stream answered (%v) while the actor sleeps", s.err)
		default:
		}
		if st, n := in.state("hold-1"), resumes(); st != atev1.ActorState_SUSPENDED || n != before {
			t.Fatalf("with a held stream: %s after %v resumes, want SUSPENDED after none", st, n-before)
		}
		in.mustCount("default/hold-1", 2) // the real request resumes it
		<-s.header
		if s.resp == nil || s.resp.StatusCode != http.StatusOK || s.resp.Header.Get("Ate-Activation") != "joined" {
			t.Fatalf("held stream: %v %v, want 200 joined", s.resp, s.err)
		}
		waitFor(t, "events on the connected stream", 10*time.Second, func() bool { return s.events.Load() > 1 || !s.isOpen() })
		if !s.isOpen() {
			t.Fatalf("stream ended: %v", s.err)
		}
		if n := resumes(); n != before+1 {
			t.Errorf("%v resumes, want the real request's only", n-before)
		}
	})
}
