package node

import (
	"context"
	"errors"
	"sync"
	"time"
)

// cutPoll is how often a worker with tunnel requests in flight is checked
// for the end of the container that admitted them: a stream to an actor
// that was checkpointed ends within this of the cut.
const cutPoll = 200 * time.Millisecond

// errCut is the cause of a tunnel request cut off because its container
// was checkpointed after the drain grace, or is gone.
var errCut = errors.New("the actor's container was checkpointed or stopped")

// cutter cuts tunnel requests whose container is gone. One watcher per
// worker polls the worker's state while requests to it are in flight.
// Safe for concurrent use.
type cutter struct {
	n *Node

	mu sync.Mutex
	// byWorker holds the in-flight requests of each worker with any;
	// guarded by mu. A worker has a running watcher exactly while it has
	// an entry.
	byWorker map[string]map[*tracked]struct{}
}

// tracked is one in-flight tunnel request.
type tracked struct {
	container string
	cancel    context.CancelCauseFunc
}

func newCutter(n *Node) *cutter {
	return &cutter{n: n, byWorker: make(map[string]map[*tracked]struct{})}
}

// track watches a request admitted for t until the returned func is
// called; cancel ends it with errCut if its container goes first.
func (c *cutter) track(t tunnelTarget, cancel context.CancelCauseFunc) (untrack func()) {
	req := &tracked{container: t.container, cancel: cancel}
	c.mu.Lock()
	set, ok := c.byWorker[t.worker]
	if !ok {
		set = make(map[*tracked]struct{})
		c.byWorker[t.worker] = set
		go c.watch(t.worker)
	}
	set[req] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(set, req)
		c.mu.Unlock()
	}
}

// watch cuts worker's requests whose container is no longer the one
// running there, or whose checkpoint ran out of drain grace; it returns
// once worker has no request in flight, or the node shuts down.
func (c *cutter) watch(worker string) {
	tick := time.NewTicker(cutPoll)
	defer tick.Stop()
	for {
		select {
		case <-c.n.ctx.Done():
			c.mu.Lock()
			delete(c.byWorker, worker)
			c.mu.Unlock()
			return
		case <-tick.C:
		}
		container, cut := c.n.admitting(worker)
		c.mu.Lock()
		set := c.byWorker[worker]
		for req := range set {
			if cut || req.container != container {
				req.cancel(errCut)
				delete(set, req)
			}
		}
		if len(set) == 0 {
			delete(c.byWorker, worker)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}
