package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"
)

// DialTimeout bounds the proxy's connect to an allowed destination.
const DialTimeout = 10 * time.Second

// MaxConns bounds one worker's relayed connections at once (each holds two
// sockets and two goroutines in the node); more are closed on accept.
const MaxConns = 1024

// Deny is the set of destinations no rule can allow: alwaysDenied, the
// node's own interface addresses (read at every connection, so addresses
// added later count), Extra (the API server's addresses) and whatever the
// operator's Ceiling denies.
type Deny struct {
	Extra []netip.Prefix
	// Ceiling is the operator's egress ceiling; nil bounds nothing.
	Ceiling *Ceiling
	// hostAddrs returns the node's own addresses; nil reads them with
	// net.InterfaceAddrs.
	hostAddrs func() ([]netip.Addr, error)
}

// Denies reports whether ip may never be dialed, and why.
func (d *Deny) Denies(ip netip.Addr) (bool, string) {
	ip = ip.Unmap()
	if !ip.Is4() {
		return true, "not IPv4"
	}
	for _, p := range alwaysDenied {
		if p.Contains(ip) {
			return true, "in " + p.String()
		}
	}
	if d == nil {
		return false, ""
	}
	for _, p := range d.Extra {
		if p.Contains(ip) {
			return true, "the API server (" + p.String() + ")"
		}
	}
	addrs, err := d.own()
	if err != nil {
		// Fail closed: an unknown host address could be this one.
		return true, "the node's own addresses are unknown: " + err.Error()
	}
	for _, a := range addrs {
		if a.Unmap() == ip {
			return true, "an address of the node itself"
		}
	}
	if ok, why := d.Ceiling.Permits(ip); !ok {
		return true, why
	}
	return false, ""
}

func (d *Deny) own() ([]netip.Addr, error) {
	if d.hostAddrs != nil {
		return d.hostAddrs()
	}
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, ifa := range ifas {
		if n, ok := ifa.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out, nil
}

// Proxy is one worker's egress proxy: it accepts the connections Apply's
// rules redirect to ProxyPort in the worker's outer namespace and relays
// each to its original destination, dialed from the namespace of the
// process (the node's), if the worker's current Allowed permits it and
// Deny does not forbid it. Safe for concurrent use.
type Proxy struct {
	ln    net.Listener
	deny  *Deny
	log   *slog.Logger
	allow atomic.Pointer[Allowed]
	// ctx ends with Close, cutting dials short.
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{} // MaxConns tokens

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup

	// refusals samples the log of refused and failed connections: an
	// actor may open them as fast as it likes, and each would otherwise
	// be a line in the node's log. suppressed counts those not logged
	// since the last line, which names the count.
	refusals   *rate.Limiter
	suppressed atomic.Int64
}

// Refusal log sampling: a burst, then one line a second per worker.
const (
	refusalLogRate  = rate.Limit(1)
	refusalLogBurst = 10
)

// NewProxy serves on ln (a listener on the gateway's ProxyPort inside the
// outer namespace, netns.Listen) until Close. It allows nothing until Set.
func NewProxy(ln net.Listener, deny *Deny, log *slog.Logger) *Proxy {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{ln: ln, deny: deny, log: log, conns: map[net.Conn]struct{}{}, slots: make(chan struct{}, MaxConns),
		refusals: rate.NewLimiter(refusalLogRate, refusalLogBurst)}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Go(p.serve)
	return p
}

// Set makes a (nil: nothing) the allow-list for new connections and
// closes every relayed connection: they belonged to the worker's previous
// actor, or to rules that changed.
func (p *Proxy) Set(a *Allowed) {
	p.allow.Store(a)
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops accepting, closes every connection and waits for the
// relays to end.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.cancel()
	p.Set(nil)
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.log.Warn("egress proxy stopped", "err", err)
			}
			return
		}
		select {
		case p.slots <- struct{}{}:
		default:
			p.log.Warn("egress refused", "why", "too many connections", "max", MaxConns)
			c.Close()
			continue
		}
		p.wg.Go(func() {
			defer func() { <-p.slots }()
			p.relay(c)
		})
	}
}

// track adds cs to the connections Set closes; the returned func
// removes them again.
func (p *Proxy) track(cs ...net.Conn) func() {
	p.mu.Lock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		for _, c := range cs {
			delete(p.conns, c)
		}
		p.mu.Unlock()
	}
}

// logRefusal logs a refused or failed connection unless the sampling
// says to count it only.
func (p *Proxy) logRefusal(msg string, args ...any) {
	if !p.refusals.Allow() {
		p.suppressed.Add(1)
		return
	}
	if n := p.suppressed.Swap(0); n > 0 {
		args = append(args, "suppressed", n)
	}
	p.log.Info(msg, args...)
}

func (p *Proxy) relay(in net.Conn) {
	defer in.Close()
	a := p.allow.Load()
	dst, err := OriginalDst(in)
	if err != nil {
		p.log.Warn("egress: no original destination", "err", err)
		return
	}
	if deny, why := p.deny.Denies(dst.Addr()); deny {
		p.logRefusal("egress refused", "dst", dst, "why", why)
		return
	}
	if !a.Permits(dst) {
		p.logRefusal("egress refused", "dst", dst, "why", "not in the template's allow-list")
		return
	}
	untrack := p.track(in)
	ctx, cancel := context.WithTimeout(p.ctx, DialTimeout)
	var d net.Dialer
	out, err := d.DialContext(ctx, "tcp4", dst.String())
	cancel()
	if err != nil {
		untrack()
		p.logRefusal("egress dial failed", "dst", dst, "err", err)
		return
	}
	defer out.Close()
	untrack()
	defer p.track(in, out)()
	if p.allow.Load() != a { // Set ran while dialing
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(out, in)
		closeWrite(out)
	}()
	_, _ = io.Copy(in, out)
	closeWrite(in)
	<-done
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// OriginalDst returns the destination a connection redirected by
// nftables (or iptables) NAT was sent to (SO_ORIGINAL_DST); for a
// connection that was not redirected it is the local address.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("egress: %T is not a TCP connection", c)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var mreq *unix.IPv6Mreq
	var serr error
	if err := rc.Control(func(fd uintptr) {
		// struct sockaddr_in fits IPv6Mreq's 20 bytes; x/sys has no
		// getter of its own for SO_ORIGINAL_DST.
		mreq, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
	}); err != nil {
		return netip.AddrPort{}, err
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("egress: SO_ORIGINAL_DST: %w", serr)
	}
	b := mreq.Multiaddr
	port := binary.BigEndian.Uint16(b[2:4])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
}
