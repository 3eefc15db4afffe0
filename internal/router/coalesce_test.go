package router

import (
	"context"
	"errors"
	"testing"
	"time"
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

// TestCoalescerRunMarksExpiredCalls: only a call that failed once its time
// was up is errCallExpired; its own error stays in the chain.
func TestCoalescerRunMarksExpiredCalls(t *testing.T) {
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
			c := coalescer{timeout: 20 * time.Millisecond}
			_, err := c.run(t.Context(), tt.fn)
			if errors.Is(err, errCallExpired) != tt.wantExpired {
				t.Errorf("err = %v, want expired %t", err, tt.wantExpired)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want it to wrap %v", err, tt.wantErr)
			}
		})
	}
}
