package store

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// renewals is a store whose RenewLease answers from errs, in turn, the
// last one for ever after.
type renewals struct {
	Store
	errs  []error
	calls atomic.Int32
}

func (r *renewals) RenewLease(context.Context, string, string, int64, time.Duration) (*Lease, error) {
	i := int(r.calls.Add(1)) - 1
	return nil, r.errs[min(i, len(r.errs)-1)]
}

// TestInstallationRenew: a failed renewal is retried; a lease taken over
// (ErrFenced) ends the renewal.
func TestInstallationRenew(t *testing.T) {
	st := &renewals{errs: []error{errors.New("connection reset"), nil, ErrFenced}}
	in := &Installation{st: st, holder: "host:/data", every: time.Millisecond}
	done := make(chan struct{})
	go func() { in.Renew(t.Context(), nil); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Renew still renewing a lease taken over")
	}
	if n := st.calls.Load(); n != 3 {
		t.Errorf("%d renewals, want 3 (a failure, a renewal, the fence)", n)
	}
}
