package store

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// renewals is a store whose RenewLease answers from errs, in turn, the
// last one for ever after, recording the tokens it was given; its
// AcquireLease answers from takes the same way (none: ErrLeaseHeld).
type renewals struct {
	Store
	errs   []error
	calls  atomic.Int32
	tokens []int64
	takes  []*Lease
}

func (r *renewals) RenewLease(_ context.Context, _, _ string, token int64, _ time.Duration) (*Lease, error) {
	i := int(r.calls.Add(1)) - 1
	r.tokens = append(r.tokens, token)
	return nil, r.errs[min(i, len(r.errs)-1)]
}

func (r *renewals) AcquireLease(context.Context, string, string, time.Duration) (*Lease, error) {
	if len(r.takes) == 0 {
		return nil, ErrLeaseHeld
	}
	l := r.takes[0]
	r.takes = r.takes[1:]
	return l, nil
}

// TestInstallationRenew: a failed renewal is retried; a lease taken over
// (ErrFenced, and another holder has it) ends the renewal.
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

// TestInstallationRenewTakesBackAnExpiredLease: a lease that merely
// expired (a database restart, a pause past its life: ErrFenced, and
// nobody else holds it) is taken back and renewed with its new token;
// only one another holder has ends the renewal.
func TestInstallationRenewTakesBackAnExpiredLease(t *testing.T) {
	st := &renewals{errs: []error{ErrFenced, nil, ErrFenced}, takes: []*Lease{{Token: 7}}}
	in := &Installation{st: st, holder: "host:/data", token: 3, every: time.Millisecond}
	done := make(chan struct{})
	go func() { in.Renew(t.Context(), nil); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Renew still renewing a lease another holder has")
	}
	if want := []int64{3, 7, 7}; !slices.Equal(st.tokens, want) {
		t.Errorf("renewed with tokens %v, want %v (the old one, then the one taken back)", st.tokens, want)
	}
}
