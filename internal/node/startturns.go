package node

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"substrate.dev/ate/internal/tracing"
)

// startTurns admits the node's sandbox starts (the runtime's restore or
// boot) a few at a time, in the order they asked, and holds the others
// back until one ends.
//
// Without it a burst of N starts runs N restores at once and the cores
// are shared among all of them: each takes as long as the whole burst,
// so every request is answered at its end (p50 ≈ p99), and the node's
// own goroutines — the probe's result, the store's write, the tunnel —
// get a sliver of the CPU between N sandboxes' threads, which stalled
// `ate up` for seconds (BENCHMARKS.md, Starts in turns). In turns, the
// early requests are answered early and the rest wait no longer than
// before, since the cores were busy either way.
//
// A turn covers the runtime's call and, for at most probeTurn more, the
// wakeup probe and restore hook: those wait on the actor's own code,
// which must not be able to hold other tenants' starts back for longer.
type startTurns struct {
	sem *semaphore.Weighted
	// waiting counts the starts waiting for their turn: how tests see a
	// start queued without waiting on a clock.
	waiting atomic.Int64
}

// DefaultMaxParallelStarts is Config.MaxParallelStarts's default: two
// per CPU the process may use, enough to keep every core busy while a
// start waits on its disk or its sandbox's set-up.
func DefaultMaxParallelStarts() int { return 2 * runtime.GOMAXPROCS(0) }

func newStartTurns(max int) *startTurns {
	if max <= 0 {
		max = DefaultMaxParallelStarts()
	}
	return &startTurns{sem: semaphore.NewWeighted(int64(max))}
}

// turn is a start's admission, from waitStartTurn.
type turn struct {
	once sync.Once
	sem  *semaphore.Weighted
	// bound, set by booted, gives the turn back probeTurn after the boot.
	bound *time.Timer
}

// release gives the turn back (once; later calls do nothing).
func (t *turn) release() { t.once.Do(func() { t.sem.Release(1) }) }

// booted starts the bound on the rest of the turn (probeTurn). Call it
// at most once, on the goroutine that calls end.
func (t *turn) booted() { t.bound = time.AfterFunc(probeTurn, t.release) }

// end gives the turn back when the start is over, if the bound has not.
func (t *turn) end() {
	if t.bound != nil {
		t.bound.Stop()
	}
	t.release()
}

// probeTurn bounds how long a start keeps its turn after its sandbox
// booted, while the wakeup probe and restore hook run: long enough to
// cover a restored actor's first moments, whose paging-in is still the
// restore's CPU (when only the runtime's call took turns, a burst was no
// faster than without turns), short enough that an actor which never
// answers holds others back for no longer than this.
const probeTurn = time.Second

// waitStartTurn blocks until a start may run its sandbox, or ctx ends
// (its error), or the node shuts down (errShuttingDown: Shutdown must not
// wait for starts queued behind others, nor see them boot). The caller
// calls booted once the runtime's call returned and end when the start
// is over.
func (n *Node) waitStartTurn(ctx context.Context) (*turn, error) {
	began := time.Now()
	ctx, span := tracing.Span(ctx, "node.start_wait")
	wait, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(n.ctx, cancel)
	defer stop()
	n.turns.waiting.Add(1)
	err := n.turns.sem.Acquire(wait, 1)
	n.turns.waiting.Add(-1)
	switch {
	case n.ctx.Err() == nil:
	case err == nil: // granted as the node began shutting down
		n.turns.sem.Release(1)
		err = errShuttingDown
	case ctx.Err() == nil: // the shutdown, not the caller, ended the wait
		err = errShuttingDown
	}
	tracing.End(span, err)
	n.cfg.Metrics.StartWait(time.Since(began))
	if err != nil {
		return nil, err
	}
	return &turn{sem: n.turns.sem}, nil
}
