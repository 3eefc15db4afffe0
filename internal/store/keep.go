package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// KeepRenewed renews f's lease for ttl every interval (± jitter, a
// fraction of it) until ctx ends (nil) or the store says the lease is
// lost (the ErrFenced error). A renewal that fails otherwise is passed
// to failed and tried again at the next interval. Workflows run it beside
// the work their lease guards.
func KeepRenewed(ctx context.Context, s Store, f Fence, ttl, interval time.Duration, jitter float64, failed func(error)) error {
	for {
		d := time.Duration(float64(interval) * (1 + jitter*(2*rand.Float64()-1)))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
		_, err := s.RenewLease(ctx, f.Key, f.Holder, f.Token, ttl)
		switch {
		case err == nil, ctx.Err() != nil:
		case errors.Is(err, ErrFenced):
			return err
		default:
			failed(err)
		}
	}
}
