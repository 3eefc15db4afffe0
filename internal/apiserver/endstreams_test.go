package apiserver

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// watchStream is the server side of one WatchEvents call; only Context
// and Send are used.
type watchStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (w watchStream) Context() context.Context { return w.ctx }
func (w watchStream) Send(*atev1.Event) error  { return nil }

// TestEndStreams: a watch that would run until its client hangs up ends
// with UNAVAILABLE once the server begins to stop, so a graceful stop
// does not wait out its deadline on connected watchers.
func TestEndStreams(t *testing.T) {
	st, _ := openBolt(t)
	s := New(st, nil, "gvisor", nil, nil)
	done := make(chan error, 1)
	go func() { done <- s.WatchEvents(&atev1.WatchEventsRequest{}, watchStream{ctx: t.Context()}) }()
	select {
	case err := <-done:
		t.Fatalf("WatchEvents ended before EndStreams: %v", err)
	case <-time.After(2 * eventPoll):
	}
	s.EndStreams()
	s.EndStreams() // a second call is harmless
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("WatchEvents after EndStreams = %v, want UNAVAILABLE", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchEvents still running 10 s after EndStreams")
	}
}
