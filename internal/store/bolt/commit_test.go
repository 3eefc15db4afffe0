package bolt

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"substrate.dev/ate/internal/store"
)

// TestCommitterKeepsSerialSemantics: many concurrent writes, some of which
// fail on the state the earlier ones left, each get the result a one-by-
// one execution gives, and exactly the successful ones are durable.
func TestCommitterKeepsSerialSemantics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ate.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bucket, key := bMeta, []byte("counter")
	read := func(tx *bbolt.Tx) int {
		n, _ := strconv.Atoi(string(tx.Bucket(bucket).Get(key)))
		return n
	}
	refused := errors.New("refused")
	const writers = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, failed := 0, 0
	for i := range writers {
		wg.Go(func() {
			err := s.update(func(tx *bbolt.Tx) error {
				n := read(tx)
				// Refuse on every fifth value: whether a write fails
				// depends on those committed before it.
				if n%5 == 4 && i%2 == 0 {
					return fmt.Errorf("at %d: %w", n, refused)
				}
				return tx.Bucket(bucket).Put(key, []byte(strconv.Itoa(n+1)))
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, refused):
				failed++
			default:
				t.Errorf("write: %v", err)
			}
		})
	}
	wg.Wait()
	if ok+failed != writers {
		t.Fatalf("ok %d + failed %d != %d writers", ok, failed, writers)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.update(func(*bbolt.Tx) error { return nil }); !errors.Is(err, errClosed) {
		t.Fatalf("write after Close = %v, want errClosed", err)
	}
	s, err = Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got int
	if err := s.db.View(func(tx *bbolt.Tx) error { got = read(tx); return nil }); err != nil {
		t.Fatal(err)
	}
	if got != ok {
		t.Fatalf("durable counter = %d, want %d successful writes (%d refused)", got, ok, failed)
	}
}

// TestRenewLeaseGivesUpWithItsContext: a lease renewal queued behind a
// commit that does not end returns when its context does, with
// store.ErrUnavailable, instead of waiting for the queue (the node
// registry renews under a deadline, and waiting stopped it hearing its
// node); the renewal stays queued and commits once the queue moves,
// extending the lease. Other writes still wait for their commit.
func TestRenewLeaseGivesUpWithItsContext(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	l, err := s.AcquireLease(ctx, "node/n1", "n1@1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A commit that holds the queue until release is closed.
	release, holding := make(chan struct{}), make(chan struct{})
	blocked := make(chan error, 1)
	go func() {
		// It succeeds, so the committer runs it once.
		blocked <- s.update(func(*bbolt.Tx) error {
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.RenewLease(rctx, "node/n1", "n1@1", l.Token, time.Hour); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RenewLease behind a held commit = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	close(release)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	// Writes commit in order: once this one has, so has the renewal.
	if err := s.update(func(*bbolt.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var got store.Lease
	if err := s.db.View(func(tx *bbolt.Tx) error {
		cur, err := get[store.Lease](tx.Bucket(bLeases), []byte("node/n1"))
		if err == nil {
			got = *cur
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !got.Expiry.After(l.Expiry.Add(30 * time.Minute)) {
		t.Errorf("lease expiry after the queued renewal committed: %s, want about an hour from now (acquired until %s)", got.Expiry, l.Expiry)
	}
}
