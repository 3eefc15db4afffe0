package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// errNodeUnreachable: the control plane still places the actor on a
// worker whose node's tunnel cannot be reached (the node died or is cut
// off, and has not yet been declared lost). The request parks: once the
// control plane recovers the actor elsewhere, or the node answers again,
// it is served (retryable).
var errNodeUnreachable = errors.New("the actor's node is unreachable")

// Tuning of the wait for an unreachable node.
const (
	// unreachableRetry spaces the looks at an actor whose node is
	// unreachable: each is a Lookup and a connection attempt, for every
	// parked actor of the node, while the control plane's loss deadline
	// (seconds) runs.
	unreachableRetry = 250 * time.Millisecond
	// probeTimeout bounds the connection attempt that tells whether an
	// unreachable tunnel answers again (a partition drops packets rather
	// than refusing them).
	probeTimeout = 250 * time.Millisecond
)

// downTunnels remembers the tunnel addresses a connection to failed, so
// that the requests for actors the control plane still places there park
// until it places them elsewhere, instead of failing one after another
// against the same dead address. An address is forgotten when a
// connection to it succeeds again (the node came back at the same
// address) by the probe lookOrResume makes.
type downTunnels struct {
	// n counts the addresses in down, read without the mutex by the
	// request path, which only looks when some are down.
	n     atomic.Int32
	mu    sync.Mutex
	down  map[string]struct{}
	probe func(ctx context.Context, addr string) error
}

// dialProbe is downTunnels' probe: a TCP connection to addr.
func dialProbe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// mark remembers addr as unreachable.
func (d *downTunnels) mark(addr string) {
	if addr == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down == nil {
		d.down = map[string]struct{}{}
	}
	if _, ok := d.down[addr]; !ok {
		d.down[addr] = struct{}{}
		d.n.Add(1)
	}
}

// marked reports whether addr is remembered as unreachable.
func (d *downTunnels) marked(addr string) bool {
	if d.n.Load() == 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.down[addr]
	return ok
}

// check returns errNodeUnreachable (wrapped, naming t) when t's tunnel
// is marked and still refuses a connection; a tunnel that accepts one is
// forgotten and nil returned.
func (d *downTunnels) check(ctx context.Context, t Target) error {
	if !d.marked(t.TunnelAddr) {
		return nil
	}
	probe := d.probe
	if probe == nil {
		probe = dialProbe
	}
	if err := probe(ctx, t.TunnelAddr); err != nil {
		return fmt.Errorf("worker %s at tunnel %s: %w (%v); waiting for the control plane to recover the actor", t.Worker, t.TunnelAddr, errNodeUnreachable, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.down[t.TunnelAddr]; ok {
		delete(d.down, t.TunnelAddr)
		d.n.Add(-1)
	}
	return nil
}
