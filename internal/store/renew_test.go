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

// TestKeepRenewed: renewals go on through failures the store may recover
// from, each reported, and stop at the first that says the lease is
// lost, returning it; a context that ends stops them with nil.
func TestKeepRenewed(t *testing.T) {
	transient := errors.New("store unreachable")
	s := &renewals{errs: []error{nil, transient, ErrFenced}}
	var failed []error
	err := KeepRenewed(t.Context(), s, Fence{Key: "k", Holder: "h", Token: 7}, time.Second, time.Millisecond, 0.1,
		func(err error) { failed = append(failed, err) })
	if !errors.Is(err, ErrFenced) || len(failed) != 1 || failed[0] != transient || !slices.Equal(s.tokens, []int64{7, 7, 7}) {
		t.Fatalf("KeepRenewed = %v after failures %v, tokens %v; want ErrFenced after one reported failure, token 7 each time", err, failed, s.tokens)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := KeepRenewed(ctx, &renewals{errs: []error{nil}}, Fence{}, time.Second, time.Hour, 0, nil); err != nil {
		t.Fatalf("KeepRenewed with an ended context = %v, want nil", err)
	}
}
