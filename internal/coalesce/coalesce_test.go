package coalesce

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"substrate.dev/ate/internal/testwait"
)

// TestExpired: a context is expired once its deadline is not after now,
// whether or not its timer has fired yet.
func TestExpired(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	deadline, _ := ctx.Deadline()
	cancelled, cancelNow := context.WithCancel(t.Context())
	cancelNow()
	tests := []struct {
		name string
		ctx  context.Context
		now  time.Time
		want bool
	}{
		{"before the deadline", ctx, deadline.Add(-time.Nanosecond), false},
		{"at the deadline, timer not fired", ctx, deadline, true},
		{"past the deadline, timer not fired", ctx, deadline.Add(time.Millisecond), true},
		{"no deadline", t.Context(), time.Now().Add(24 * time.Hour), false},
		{"ended without a deadline", cancelled, time.Now(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := expired(tt.ctx, tt.now); got != tt.want {
				t.Errorf("expired = %t, want %t", got, tt.want)
			}
		})
	}
}

// TestRunMarksExpiredCalls: only a call that failed once its time was up is
// ErrExpired; its own error stays in the chain.
func TestRunMarksExpiredCalls(t *testing.T) {
	final := errors.New("actor gone")
	tests := []struct {
		name        string
		fn          func(context.Context) (any, error)
		wantErr     error
		wantExpired bool
	}{
		{name: "fails in time", fn: func(context.Context) (any, error) { return nil, final }, wantErr: final},
		{name: "fails after its timeout", fn: func(ctx context.Context) (any, error) {
			<-ctx.Done()
			return nil, final
		}, wantErr: final, wantExpired: true},
		{name: "succeeds", fn: func(context.Context) (any, error) { return 1, nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := Group{Timeout: 20 * time.Millisecond}
			_, err := g.run(t.Context(), tt.fn)
			if errors.Is(err, ErrExpired) != tt.wantExpired {
				t.Errorf("err = %v, want expired %t", err, tt.wantExpired)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want it to wrap %v", err, tt.wantErr)
			}
		})
	}
}

// TestDoShares: callers arriving while a call runs share its one run and
// its result; exactly one of them is the leader.
func TestDoShares(t *testing.T) {
	g := Group{Timeout: time.Minute}
	release := make(chan struct{})
	var runs atomic.Int64
	fn := func(context.Context) (any, error) {
		runs.Add(1)
		<-release
		return "v", nil
	}
	const n = 5
	var wg sync.WaitGroup
	var leaders atomic.Int64
	for range n {
		wg.Go(func() {
			v, leader, err := g.Do(t.Context(), "k", fn)
			if v != "v" || err != nil {
				t.Errorf("Do = %v, %v", v, err)
			}
			if leader {
				leaders.Add(1)
			}
		})
	}
	testwait.Until(t, "all callers to join", func() bool { return g.Waiting() == n })
	close(release)
	wg.Wait()
	if r, l := runs.Load(), leaders.Load(); r != 1 || l != 1 {
		t.Errorf("%d runs, %d leaders; want 1 and 1", r, l)
	}
	if w := g.Waiting(); w != 0 {
		t.Errorf("%d still waiting", w)
	}
}

// TestDoCallerLeaves: a caller whose context ends — the leader included —
// stops waiting with its cause, while the call goes on, undisturbed, for
// the callers still waiting; the call keeps the leader's values.
func TestDoCallerLeaves(t *testing.T) {
	type ctxKey struct{}
	g := Group{Timeout: time.Minute}
	release := make(chan struct{})
	fn := func(ctx context.Context) (any, error) {
		<-release
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return ctx.Value(ctxKey{}), nil
	}
	gone := errors.New("client gone")
	leaderCtx, cancel := context.WithCancelCause(context.WithValue(t.Context(), ctxKey{}, "leader's"))
	leaderDone := make(chan error, 1)
	go func() {
		_, leader, err := g.Do(leaderCtx, "k", fn)
		if !leader {
			t.Error("the first caller did not lead")
		}
		leaderDone <- err
	}()
	testwait.Until(t, "the leader to start", func() bool { return g.Waiting() == 1 })
	joinerDone := make(chan any, 1)
	go func() {
		v, leader, err := g.Do(t.Context(), "k", fn)
		if leader || err != nil {
			t.Errorf("joiner: leader %t, err %v", leader, err)
		}
		joinerDone <- v
	}()
	testwait.Until(t, "the joiner to join", func() bool { return g.Waiting() == 2 })
	cancel(gone)
	if err := <-leaderDone; !errors.Is(err, gone) {
		t.Errorf("leader: %v, want its cause %v", err, gone)
	}
	close(release)
	if v := <-joinerDone; v != "leader's" {
		t.Errorf("joiner got %v, want the call's result with the leader's values", v)
	}
}

// TestStart: Start runs nothing while a call runs under its key, and a
// caller of Do joins the background call.
func TestStart(t *testing.T) {
	g := Group{Timeout: time.Minute}
	release := make(chan struct{})
	var runs atomic.Int64
	fn := func(context.Context) (any, error) {
		runs.Add(1)
		<-release
		return 1, nil
	}
	g.Start(t.Context(), "k", fn)
	g.Start(t.Context(), "k", fn)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if v, leader, err := g.Do(t.Context(), "k", fn); v != 1 || leader || err != nil {
			t.Errorf("Do = %v, leader %t, %v; want 1 from the background call", v, leader, err)
		}
	}()
	testwait.Until(t, "the caller to join", func() bool { return g.Waiting() == 1 })
	close(release)
	<-done
	if n := runs.Load(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}
