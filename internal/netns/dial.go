package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"time"

	vns "github.com/vishvananda/netns"
)

// DialContext connects to addr on network ("tcp", "tcp4", "udp", ...) from
// inside the network namespace mounted at nsPath. The socket belongs to
// that namespace for its whole life, so the returned conn keeps working
// from any goroutine after the dialing thread has gone back to the host
// namespace; the caller owns and closes it.
//
// addr's host must be an IP literal: name resolution and dual-stack dialing
// would run on other goroutines, outside the namespace. ctx's deadline and
// cancellation bound the connect as for net.Dialer.DialContext.
func DialContext(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("netns: dial %s: %w", addr, err)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return nil, fmt.Errorf("netns: dial %s: host must be an IP literal: %w", addr, err)
	}
	var conn net.Conn
	err = inNetNS(nsPath, func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		conn = c
		return err
	})
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		if cerr := ctxErr(ctx); cerr != nil && !errors.Is(err, cerr) {
			// The dialer may report the ctx deadline as the socket's
			// own i/o timeout; callers match the ctx's error.
			return nil, fmt.Errorf("netns: dial %s in %s: %w (%w)", addr, nsPath, err, cerr)
		}
		return nil, fmt.Errorf("netns: dial %s in %s: %w", addr, nsPath, err)
	}
	return conn, nil
}

// ctxErr is ctx.Err(), or DeadlineExceeded once ctx's deadline has
// passed: the socket's timer can fire before ctx's own, which leaves
// ctx.Err() nil for a moment after the dial gave up because of it.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// inNetNS runs fn on a goroutine whose OS thread is in the namespace at
// nsPath, and waits for it. fn must create its sockets on the calling
// goroutine (not start goroutines that do).
func inNetNS(nsPath string, fn func() error) error {
	target, err := openNS(nsPath)
	if err != nil {
		return err
	}
	defer target.Close()
	return onMovedThread(nsPath, func() error { return vns.Set(target) }, fn)
}

// onMovedThread runs fn on a goroutine locked to an OS thread that enter
// has moved into another network namespace (setns or unshare), then moves
// the thread back to its original namespace before unlocking it, and
// waits. If the thread cannot be put back it stays locked, and the
// runtime ends it with the goroutine.
//
// Putting the thread back matters even though a locked goroutine's
// thread dies with it: when that thread is the main thread, Go wedges it
// instead, and the main thread's namespace is the process's
// (/proc/self/ns/net). runsc's library code restores threads to that
// namespace after joining a sandbox's (specutils.ApplyNS), so the
// process's threads would drift into a worker's namespace and every
// loopback dial from them (the router to the tunnel) would be refused.
func onMovedThread(what string, enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := enter(); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: %w", what, err)
			return
		}
		fnErr := fn()
		if err := vns.Set(orig); err != nil {
			// Stay locked: this thread dies with the goroutine.
			errc <- fmt.Errorf("return from %s: %w (fn: %v)", what, err, fnErr)
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// Listen opens a listener on addr (an IP literal and port) inside the
// network namespace mounted at nsPath. Like a dialed conn, the listening
// socket stays in that namespace; the caller closes it.
func Listen(nsPath, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNetNS(nsPath, func() error {
		l, err := net.Listen(network, addr)
		ln = l
		return err
	})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("netns: listen %s in %s: %w", addr, nsPath, err)
	}
	return ln, nil
}
