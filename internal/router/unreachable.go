package router

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
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
	// notServingRetry is how long a tunnel whose node said it serves
	// nothing (tunnelproto.HeaderNotServing) is left alone before one
	// request tries it again: a connection would succeed, so only a
	// request tells whether the node was welcomed back.
	notServingRetry = time.Second
)

// downTunnels remembers the tunnel addresses a connection to failed, or
// whose node said it serves nothing, so that the requests for actors the
// control plane still places there park until it places them elsewhere,
// instead of failing one after another against the same node. An
// address a connection failed to is forgotten when a connection to it
// succeeds again (the node came back at the same address) by the probe
// lookOrResume makes; one whose node serves nothing, after
// notServingRetry, so that a request tries it again.
type downTunnels struct {
	// n counts the addresses in down, read without the mutex by the
	// request path, which only looks when some are down.
	n  atomic.Int32
	mu sync.Mutex
	// down holds when the node said it serves nothing, or the zero
	// time for an address a connection failed to.
	down  map[string]time.Time
	probe func(ctx context.Context, addr string) error
}

// tunnelProbe is downTunnels' probe of tunnels that speak TLS
// (handshakeProbe) or plaintext (dialProbe: a TCP connection, as a
// plaintext tunnel would wait for a request line after a TLS hello).
func tunnelProbe(useTLS bool) func(ctx context.Context, addr string) error {
	if useTLS {
		return handshakeProbe
	}
	return dialProbe
}

// dialProbe is whether a TCP connection to addr can be made within
// probeTimeout.
func dialProbe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// handshakeProbe is whether the TLS tunnel at addr answers within
// probeTimeout. A TCP connection is not enough: with the node's
// packets to this router dropped (a one-way partition) the connection
// may still be made while nothing it sends arrives, and every request
// then waits out a TLS handshake. So the probe opens a TLS handshake and
// counts any answer — a server hello or an alert — as the node being
// there; only silence, a refused or reset connection count as
// unreachable. It verifies nothing and sends no request.
func handshakeProbe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	err = tc.HandshakeContext(ctx)
	var ne net.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, io.EOF):
		return fmt.Errorf("tunnel %s does not answer: %w", addr, err)
	}
	return nil // it answered, if not with TLS this router trusts
}

// probeOf returns d's probe (dialProbe when none was set).
func (d *downTunnels) probeOf() func(ctx context.Context, addr string) error {
	if d.probe == nil {
		return dialProbe
	}
	return d.probe
}

// mark remembers addr as unreachable.
func (d *downTunnels) mark(addr string) { d.set(addr, time.Time{}) }

// markNotServing remembers that addr's node serves nothing now.
func (d *downTunnels) markNotServing(addr string) { d.set(addr, time.Now()) }

func (d *downTunnels) set(addr string, at time.Time) {
	if addr == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down == nil {
		d.down = map[string]time.Time{}
	}
	if _, ok := d.down[addr]; !ok {
		d.n.Add(1)
	}
	d.down[addr] = at
}

// marked reports whether addr is remembered.
func (d *downTunnels) marked(addr string) bool {
	_, ok := d.entry(addr)
	return ok
}

// entry reports whether addr is remembered, and since when its node
// serves nothing (zero: a connection to it failed).
func (d *downTunnels) entry(addr string) (notServingSince time.Time, ok bool) {
	if d.n.Load() == 0 {
		return time.Time{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.down[addr]
	return at, ok
}

func (d *downTunnels) forget(addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.down[addr]; ok {
		delete(d.down, addr)
		d.n.Add(-1)
	}
}

// check returns errNodeUnreachable (wrapped, naming t) when t's tunnel
// is marked and still refuses a connection, or its node said it serves
// nothing less than notServingRetry ago; otherwise the tunnel is
// forgotten and nil returned.
func (d *downTunnels) check(ctx context.Context, t Target) error {
	since, ok := d.entry(t.TunnelAddr)
	switch {
	case !ok:
		return nil
	case !since.IsZero():
		if time.Since(since) < notServingRetry {
			return fmt.Errorf("worker %s at tunnel %s: %w (its node serves nothing now); waiting for the control plane to welcome the node again or recover the actor", t.Worker, t.TunnelAddr, errNodeUnreachable)
		}
	default:
		if err := d.probeOf()(ctx, t.TunnelAddr); err != nil {
			return fmt.Errorf("worker %s at tunnel %s: %w (%v); waiting for the control plane to recover the actor", t.Worker, t.TunnelAddr, errNodeUnreachable, err)
		}
	}
	d.forget(t.TunnelAddr)
	return nil
}
