package node

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of SelfServiceLimits. An actor calls the endpoint a handful of
// times in its life (a token every few minutes, an alarm, a suspend);
// these leave room for many times that, and stop a loop or a flood from
// costing the node (sockets, goroutines) or the record store (every call
// is checked there) more than that.
const (
	// DefaultSelfServiceMaxConns bounds one worker's connections to its
	// endpoint at once: a client keeps a few alive, a fan-out of
	// goroutines a few dozen.
	DefaultSelfServiceMaxConns = 64
	// DefaultSelfServiceRate and DefaultSelfServiceBurst bound one
	// worker's calls: 10 a second on average, 50 at once.
	DefaultSelfServiceRate  = 10
	DefaultSelfServiceBurst = 50
)

// The endpoint's timeouts. Requests are small (at most maxSelfBody
// bytes) and answers smaller, so a client that takes longer is not
// sending a request: it holds a connection of the cap.
const (
	// selfServiceReadHeaderTimeout cuts a connection whose request
	// header is not complete in time (slowloris).
	selfServiceReadHeaderTimeout = 5 * time.Second
	// selfServiceReadTimeout cuts one whose whole request (4 KiB at most)
	// is not read in time: a body dripped byte by byte.
	selfServiceReadTimeout = 10 * time.Second
	// selfServiceIdleTimeout closes a kept-alive connection with no next
	// request; a client opens another when it has one.
	selfServiceIdleTimeout = 30 * time.Second
	// refusalTimeout bounds the answer to a connection over the cap.
	refusalTimeout = time.Second
	// refusalHeadWait bounds the wait for the request head of a
	// connection over the cap before it is answered anyway.
	refusalHeadWait = 250 * time.Millisecond
	// maxRefusing bounds the refusals being answered at once; beyond it,
	// a connection over the cap is closed without an answer.
	maxRefusing = 16
)

// SelfServiceLimits bound what one worker's actor may consume of the
// node through its self-service endpoint (docs/security.md, Limits);
// zero fields take the defaults above.
type SelfServiceLimits struct {
	// MaxConns is the most connections one worker may hold to its
	// endpoint at once; one more is answered 503 and closed.
	MaxConns int
	// Rate (calls per second) and Burst bound one actor incarnation's
	// calls on its worker (POST /v1/token, /v1/alarms, /v1/suspend,
	// /v1/pause: each reaches the record store); a call over them is
	// answered 429 with Retry-After.
	Rate  float64
	Burst int
}

// Validate refuses values no default can mend.
func (l SelfServiceLimits) Validate() error {
	if l.MaxConns < 0 || l.Rate < 0 || l.Burst < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) {
		return fmt.Errorf("self-service limits: max connections %d, rate %g, burst %d: none may be negative (0 takes the default)",
			l.MaxConns, l.Rate, l.Burst)
	}
	return nil
}

// selfServiceLimits are the limits one worker's endpoint applies: the
// configured ones and the timeouts (tests shorten them).
type selfServiceLimits struct {
	SelfServiceLimits
	readHeaderTimeout, readTimeout, idleTimeout time.Duration
}

// withDefaults fills zero fields.
func (l selfServiceLimits) withDefaults() selfServiceLimits {
	l.MaxConns = cmp.Or(l.MaxConns, DefaultSelfServiceMaxConns)
	l.Rate = cmp.Or(l.Rate, DefaultSelfServiceRate)
	l.Burst = cmp.Or(l.Burst, DefaultSelfServiceBurst)
	l.readHeaderTimeout = cmp.Or(l.readHeaderTimeout, selfServiceReadHeaderTimeout)
	l.readTimeout = cmp.Or(l.readTimeout, selfServiceReadTimeout)
	l.idleTimeout = cmp.Or(l.idleTimeout, selfServiceIdleTimeout)
	return l
}

// capListener accepts at most cap(slots) connections open at once. One
// more is not queued (the actor would only wait, holding a socket in the
// backlog) but answered with a 503 saying why and closed, so whatever an
// actor opens, its worker's endpoint holds at most that many sockets and
// goroutines of the node. Close waits for the answers being written.
type capListener struct {
	net.Listener
	slots    chan struct{}
	refusing chan struct{}
	refusal  []byte
	// refused is told of every connection refused.
	refused func()
	answers sync.WaitGroup
}

func newCapListener(ln net.Listener, maxConns int, refused func()) *capListener {
	msg := fmt.Sprintf("this worker already holds %d connections to the self-service endpoint, the most it may: "+
		"close idle ones or send calls over fewer, then retry\n", maxConns)
	refusal := fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
	return &capListener{Listener: ln, slots: make(chan struct{}, maxConns), refusing: make(chan struct{}, maxRefusing), refusal: refusal, refused: refused}
}

// Accept returns the next connection within the cap; it releases its
// place when closed.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &cappedConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
		default:
		}
		l.refused()
		select {
		case l.refusing <- struct{}{}:
			l.answers.Go(func() {
				defer func() { <-l.refusing }()
				refuse(c, l.refusal)
			})
		default:
			// Refusals are being answered as fast as they come: the
			// flood gets no answer.
			_ = c.Close()
		}
	}
}

// Close closes the listener and waits for the refusals being answered.
func (l *capListener) Close() error {
	err := l.Listener.Close()
	l.answers.Wait()
	return err
}

// refuse writes answer on c and closes it, reading what the client sent
// meanwhile: closing with unread bytes would reset the connection, and a
// reset can discard the answer before the client reads it.
//
// The answer waits for the request head (refusalHeadWait at most): an
// HTTP client that reads an answer before it has sent its request takes
// it for an unsolicited response on an idle connection and fails the
// call (Go's net/http does) instead of returning the 503 and its reason.
func refuse(c net.Conn, answer []byte) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refusalHeadWait))
	awaitHead(c)
	_ = c.SetDeadline(time.Now().Add(refusalTimeout))
	if _, err := c.Write(answer); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, maxSelfBody+8<<10))
}

// awaitHead reads from c until it has read the end of an HTTP request
// head, 8 KiB, an error or c's deadline.
func awaitHead(c net.Conn) {
	buf := make([]byte, 0, 8<<10)
	for len(buf) < cap(buf) {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		// The end may span two reads: look a little back.
		if bytes.Contains(buf[max(0, len(buf)-n-3):], []byte("\r\n\r\n")) || err != nil {
			return
		}
	}
}

// cappedConn gives its place in the cap back when closed.
type cappedConn struct {
	net.Conn
	release func()
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// callLimiter bounds the calls of the actor a worker hosts: a token
// bucket per incarnation, so a worker's next actor does not inherit a
// bucket its predecessor emptied. Safe for concurrent use.
type callLimiter struct {
	rate  rate.Limit
	burst int

	mu  sync.Mutex
	uid string        // guarded by mu: whose bucket lim is
	lim *rate.Limiter // guarded by mu
}

// wait takes a call of actor uid at now from its bucket; it returns 0
// when the call may go ahead, else how long until it could (nothing is
// taken).
func (c *callLimiter) wait(uid string, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lim == nil || c.uid != uid {
		c.uid, c.lim = uid, rate.NewLimiter(c.rate, c.burst)
	}
	r := c.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d
	}
	return 0
}

// limitCalls answers 429 with Retry-After to a call over l's rate for the
// actor s's gate admits, telling refused, and passes the others to next.
func limitCalls(s *slot, l selfServiceLimits, refused func(), next http.Handler) http.Handler {
	calls := &callLimiter{rate: rate.Limit(l.Rate), burst: l.Burst}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := calls.wait(s.gate.hosted(), time.Now())
		if d == 0 {
			next.ServeHTTP(w, r)
			return
		}
		refused()
		secs := max(1, int(math.Ceil(d.Seconds())))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, fmt.Sprintf("too many self-service calls from this actor: at most %g a second on average and %d at once; retry after %d s",
			l.Rate, l.Burst, secs), http.StatusTooManyRequests)
	})
}
