package bolt

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/testwait"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ate.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

// holdCommits starts a write that holds the committer until the returned
// function is called, and returns once it holds it.
func holdCommits(t *testing.T, s *Store) (release func()) {
	t.Helper()
	holding, free := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		// It succeeds, so the committer runs it once.
		done <- s.update(func(*bbolt.Tx) error {
			close(holding)
			<-free
			return nil
		})
	}()
	<-holding
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(free)
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release) // before the store's Close, which waits for it
	return release
}

// queued is how many writes wait for the committer.
func queued(s *Store) int {
	s.writes.mu.Lock()
	defer s.writes.mu.Unlock()
	return len(s.writes.queue)
}

// TestLeasesNeedNoCommit: taking, renewing and giving back a lease
// answer while a commit holds the queue (before, each was a commit of
// its own, and a renewal queued behind a burst's writes let a node's
// lease run out: BENCHMARKS.md, Issue 35's other targets).
func TestLeasesNeedNoCommit(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	holdCommits(t, s)
	l, err := s.AcquireLease(ctx, "actor/ns/a", "r1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.RenewLease(ctx, l.Key, l.Holder, l.Token, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if r.Token != l.Token || !r.Expiry.After(l.Expiry.Add(30*time.Minute)) {
		t.Fatalf("renewed lease %+v, want token %d until about an hour from now", r, l.Token)
	}
	if err := s.ReleaseLease(ctx, l.Key, l.Holder); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, l.Key, "r2", time.Minute); err != nil {
		t.Fatalf("lease given back, then taken by another holder: %v", err)
	}
}

// TestLeaseTakeoverWaitsForQueuedWrites: a write that passed its fence
// check under a lease commits before the lease is taken over, so the
// new holder reads it; a write under the old token after the takeover is
// fenced.
func TestLeaseTakeoverWaitsForQueuedWrites(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	old, err := s.AcquireLease(ctx, "actor/ns/a", "r1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	fenced := store.WithFence(ctx, store.Fence{Key: old.Key, Holder: old.Holder, Token: old.Token})

	release := holdCommits(t, s)
	write := make(chan error, 1)
	go func() {
		write <- s.update(func(tx *bbolt.Tx) error {
			if err := s.checkFence(fenced); err != nil {
				return err
			}
			return tx.Bucket(bMeta).Put([]byte("written"), []byte("under the old token"))
		})
	}()
	testwait.Until(t, "the fenced write queued", func() bool { return queued(s) == 1 })
	// The holder takes its own lease again (a new token), as a
	// workflow's successor in the same process would.
	taken := make(chan *store.Lease, 1)
	go func() {
		l, err := s.AcquireLease(ctx, old.Key, old.Holder, time.Minute)
		if err != nil {
			t.Error(err)
		}
		taken <- l
	}()
	testwait.Until(t, "the takeover queued behind it, or done", func() bool { return queued(s) == 2 || len(taken) == 1 })
	release()
	if err := <-write; err != nil {
		t.Fatalf("write checked under the old token before the takeover: %v", err)
	}
	l := <-taken
	if l == nil || l.Token <= old.Token {
		t.Fatalf("takeover = %+v, want a token above %d", l, old.Token)
	}
	if _, err := s.UpdateActor(fenced, &store.Actor{Atespace: "ns", Name: "x"}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("write under the old token after the takeover: %v, want ErrFenced", err)
	}
}

// TestLeaseTokensGrowAcrossOpens: a token is never handed out twice,
// across processes (reopening the file) and across reserved blocks.
func TestLeaseTokensGrowAcrossOpens(t *testing.T) {
	s, path := openTemp(t)
	ctx := context.Background()
	first, err := s.AcquireLease(ctx, "k", "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Use up the block: the next acquisition reserves another.
	s.leases.mu.Lock()
	s.leases.next = s.leases.limit
	limit := s.leases.limit
	s.leases.mu.Unlock()
	second, err := s.AcquireLease(ctx, "k2", "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if second.Token != limit+1 {
		t.Fatalf("token after the block ran out = %d, want %d", second.Token, limit+1)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	third, err := s2.AcquireLease(ctx, "k", "h2", time.Minute)
	if err != nil {
		t.Fatalf("a lease of the closed store's holder after reopening: %v", err)
	}
	if third.Token <= second.Token || second.Token <= first.Token {
		t.Fatalf("tokens %d, %d, then %d after reopening: want each above the last", first.Token, second.Token, third.Token)
	}
}
