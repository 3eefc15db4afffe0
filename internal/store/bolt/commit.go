package bolt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"

	"substrate.dev/ate/internal/store"
)

// errClosed is returned by writes after Close.
var errClosed = errors.New("store is closed")

// committer is group commit for bbolt writes: a write that arrives while
// none is running commits at once, in its own transaction, and writes
// that arrive while one commits wait and then share the next transaction
// and its two fdatasyncs. A lone writer waits for nothing (bbolt's own
// DB.Batch holds every write for MaxBatchDelay, 10 ms by default, which
// cost the single-client wake-up more than batching saved; BENCHMARKS.md),
// and N concurrent writers pay about one commit instead of N.
//
// Each write function must be safe to run more than once, as with
// DB.Batch: when one fails, the transaction is rolled back, the functions
// queued before it commit again without it, it runs alone so that its
// error is the one a serial execution gives, and those after it go into
// the next transaction. Order is preserved, so every caller sees the
// result it would have seen had the writes run one by one in arrival
// order.
//
// One goroutine, alive as long as the store, runs every commit: starting
// one per burst of writes made each grow its stack anew while encoding
// records (BENCHMARKS.md, Control plane: Where a wake-up's time goes).
type committer struct {
	db *bbolt.DB
	// observer, if set, is told of every transaction commit runs.
	observer atomic.Pointer[store.CommitObserver]

	mu     sync.Mutex
	queue  []*write
	closed bool
	// kick has a value while queue may be non-empty; closed by close,
	// after which the loop commits what is queued and ends.
	kick chan struct{}
	done chan struct{}
}

type write struct {
	fn   func(*bbolt.Tx) error
	done chan error
}

func newCommitter(db *bbolt.DB) *committer {
	c := &committer{db: db, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go c.loop()
	return c
}

// update runs fn in a write transaction, possibly shared with other
// writes, and returns fn's error or the commit's.
func (c *committer) update(fn func(*bbolt.Tx) error) error {
	w, err := c.enqueue(fn)
	if err != nil {
		return err
	}
	return <-w.done
}

// updateUnlessDone is update for a caller that stops waiting when ctx
// ends, with store.ErrUnavailable and ctx's error: fn stays queued and
// may still run and commit. Only a write whose late commit is harmless
// may use it — a lease renewal, which only ever extends a lease for a
// holder and token that still hold it — so a caller with a deadline
// (the node registry renewing a node's lease on a heartbeat) is not held
// for as long as the commits queued before it take.
func (c *committer) updateUnlessDone(ctx context.Context, fn func(*bbolt.Tx) error) error {
	w, err := c.enqueue(fn)
	if err != nil {
		return err
	}
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("write still queued behind other commits: %w: %w", store.ErrUnavailable, ctx.Err())
	}
}

// enqueue queues fn for the next transaction.
func (c *committer) enqueue(fn func(*bbolt.Tx) error) (*write, error) {
	w := &write{fn: fn, done: make(chan error, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	c.queue = append(c.queue, w)
	select {
	case c.kick <- struct{}{}:
	default: // the loop is already due to look at the queue
	}
	return w, nil
}

// loop commits queued writes whenever kicked, until close.
func (c *committer) loop() {
	defer close(c.done)
	for range c.kick {
		for {
			c.mu.Lock()
			batch := c.queue
			c.queue = nil
			c.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			c.commit(batch)
		}
	}
}

// commit runs batch in as few transactions as its failures allow.
func (c *committer) commit(batch []*write) {
	for len(batch) > 0 {
		failed := -1 // stays -1 if the transaction never began
		var fnErr error
		began := time.Now()
		err := c.db.Update(func(tx *bbolt.Tx) error {
			failed, fnErr = runAll(tx, batch)
			return fnErr
		})
		if o := c.observer.Load(); o != nil && failed < 0 && err == nil {
			(*o).Commit(time.Since(began), len(batch))
		}
		switch {
		case failed < 0:
			// Committed (err == nil) or the commit itself failed: every
			// write in it shares the outcome.
			for _, w := range batch {
				w.done <- err
			}
			return
		case failed == 0:
			batch[0].done <- fnErr
			batch = batch[1:]
		default:
			// Commit those before the failure without it; the failing
			// write then heads the next transaction, so it fails first
			// and alone, on their result.
			head := batch[:failed]
			herr := c.db.Update(func(tx *bbolt.Tx) error {
				_, err := runAll(tx, head)
				return err
			})
			if herr != nil {
				// They succeeded a moment ago on the same state, so only
				// the disk can fail them now: one transaction each.
				for _, w := range head {
					w.done <- c.db.Update(w.fn)
				}
			} else {
				for _, w := range head {
					w.done <- nil
				}
			}
			batch = batch[failed:]
		}
	}
}

// runAll runs ws in tx in order until one fails, and returns that one's
// index and error; -1 and nil when all succeed.
func runAll(tx *bbolt.Tx, ws []*write) (int, error) {
	for i, w := range ws {
		if err := w.fn(tx); err != nil {
			return i, err
		}
	}
	return -1, nil
}

// close refuses new writes and waits for queued ones to finish.
func (c *committer) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.kick)
	}
	c.mu.Unlock()
	<-c.done
}
