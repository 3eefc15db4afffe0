package node

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"substrate.dev/ate/internal/sandbox/fake"
)

// TestWorkerActivity: the tunnel counts each incarnation's requests and
// streams, a request that outlives its container never counts against the
// worker's next actor, and a worker hosting nothing reports nothing.
func TestWorkerActivity(t *testing.T) {
	n := newTestNode(t, fake.New(fake.Config{}))
	w := n.order[0]
	if _, ok := n.WorkerActivity(w); ok {
		t.Fatal("activity reported for an empty worker")
	}
	if err := n.Start(t.Context(), StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	act, ok := n.WorkerActivity(w)
	if !ok || act.ActorUID != "a" || act.Served != 0 || act.InFlight != 0 || act.Started.IsZero() || act.Last != act.Started {
		t.Fatalf("after start: %+v, %v", act, ok)
	}

	tunnel := httptest.NewServer(n.NewTunnel())
	defer tunnel.Close()
	tunnelGet(t, tunnel.URL, w, "a", "/")
	if act, _ = n.WorkerActivity(w); act.Served != 1 || act.InFlight != 0 || !act.Last.After(act.Started) {
		t.Fatalf("after one request: %+v", act)
	}

	up := &recordingUplink{}
	n.SetUplink(up)
	_, wsEnding, releaseStream, ok := n.enter(w, "a", wsRequest())
	if !ok || wsEnding != nil {
		t.Fatal("stream not admitted")
	}
	_, _, releasePlain, _ := n.enter(w, "a", plainRequest())
	_, _, releasePlain2, _ := n.enter(w, "a", plainRequest())
	if act, _ = n.WorkerActivity(w); act.InFlight != 3 || act.Streams != 1 {
		t.Fatalf("with a stream and two requests open: %+v", act)
	}
	releasePlain()
	if len(up.idle) != 0 {
		t.Fatalf("idle reported with a request still open: %v", up.idle)
	}
	releasePlain2()
	if act, _ = n.WorkerActivity(w); act.InFlight != 1 || act.Streams != 1 || act.Served != 3 {
		t.Fatalf("with the stream open: %+v", act)
	}
	if len(up.idle) != 1 || up.idle[0] != w {
		t.Fatalf("idle reports %v, want one for %s once only the stream is open", up.idle, w)
	}
	// A listening stream is a stream too, counted apart, and told when a
	// drain starts; a WebSocket is not.
	_, ending, releaseListen, _ := n.enter(w, "a", listenRequest())
	if act, _ = n.WorkerActivity(w); act.InFlight != 2 || act.Streams != 2 || act.Listeners != 1 || ending == nil {
		t.Fatalf("with a WebSocket and a listening stream open: %+v (ending %v)", act, ending)
	}
	releaseListen()
	if act, _ = n.WorkerActivity(w); act.Listeners != 0 || len(up.idle) != 2 {
		t.Fatalf("after the listening stream: %+v, idle reports %v (want a second one)", act, up.idle)
	}
	up.idle = up.idle[:1]

	if err := n.Stop(t.Context(), w, "a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.WorkerActivity(w); ok {
		t.Fatal("activity reported after the actor stopped")
	}
	if err := n.Start(t.Context(), StartRequest{Worker: w, ActorUID: "b", Atespace: "ns", Name: "b", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	releaseStream() // a's stream ends after b started
	if len(up.idle) != 1 {
		t.Fatalf("a's late stream reported b's worker idle: %v", up.idle)
	}
	if act, _ = n.WorkerActivity(w); act.ActorUID != "b" || act.InFlight != 0 || act.Streams != 0 || act.Served != 0 {
		t.Fatalf("b's activity after a's late stream ended: %+v", act)
	}
}

// plainRequest, wsRequest and listenRequest are requests as the tunnel
// classifies them: a real request, a stream that is not a listening one
// (a WebSocket upgrade) and a listening stream (a GET for Server-Sent
// Events).
func plainRequest() *http.Request {
	return httptest.NewRequest(http.MethodGet, "/", nil)
}

func wsRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/ws", nil)
	r.Header.Set("Upgrade", "websocket")
	return r
}

func listenRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/sse", nil)
	r.Header.Set("Accept", "text/event-stream")
	return r
}

// recordingUplink is a node's control plane that records what it is
// told and answers no self-service call.
type recordingUplink struct{ idle []string }

func (u *recordingUplink) WorkerExited(string, string) {}
func (u *recordingUplink) WorkerIdle(worker string)    { u.idle = append(u.idle, worker) }
func (u *recordingUplink) SelfCall(context.Context, string, string, string, []byte) (int, []byte) {
	return http.StatusNotImplemented, nil
}
