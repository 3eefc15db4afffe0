package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"substrate.dev/ate/internal/activation"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/tunnelproto"
)

// forward proxies r (request id rid) to t's tunnel and returns nil once
// the actor's response has been relayed to w. On error nothing has been
// written to w (the caller answers): a 421 from the tunnel
// (errMisdirected), the tunnel's own answer for an actor that gave none
// (*tunnelError), a *routeTimeoutError, a transport error (connection
// refused, timeouts), or the client going away. A stream cut after the
// response header went out (stream idle timeout, actor gone) aborts the
// handler with http.ErrAbortHandler, which tells the client the body is
// incomplete.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, t Target, act activated, rid string, rec *access) error {
	a := &proxyAttempt{h: h, w: w, t: t, act: act, rid: rid, rec: rec, p: t.Policy.withDefaults(h.cfg), sentAt: time.Now()}
	// Cancelling the outbound request closes its tunnel connection, so a
	// reply that comes late can never be read by another request.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	a.cancel = cancel
	a.trace.WroteHeaders = a.wroteHeaders
	ctx = httptrace.WithClientTrace(context.WithValue(ctx, attemptKey{}, a), &a.trace)
	a.timer = time.AfterFunc(a.p.RouteTimeout, a.fire)
	defer a.timer.Stop()
	h.proxy.ServeHTTP(w, r.WithContext(ctx))
	if a.failed == nil {
		return nil
	}
	if errors.Is(context.Cause(ctx), errRouteTimeout) {
		return &routeTimeoutError{timeout: a.p.RouteTimeout, delivered: a.sent.Load()}
	}
	return fmt.Errorf("proxy to worker %s: %w", t.Worker, a.failed)
}

// newReverseProxy returns the proxy every forward shares; its hooks find
// the request's proxyAttempt in the request's context. One proxy and one
// attempt record per request, instead of a proxy with closures over the
// attempt's variables, saves the router several allocations per request.
func (h *Handler) newReverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { attemptOf(pr.In.Context()).rewrite(pr) },
		Transport:  h.cfg.Transport,
		BufferPool: h.buffers,
		// FlushInterval 0: responses without a Content-Length (chunked
		// streams) and Server-Sent Events are flushed on every write;
		// responses of known length go out in full buffers, which saves
		// a write per response on ordinary requests.
		ErrorLog:       h.errorLog,
		ModifyResponse: func(res *http.Response) error { return attemptOf(res.Request.Context()).modifyResponse(res) },
		ErrorHandler: func(_ http.ResponseWriter, r *http.Request, err error) {
			attemptOf(r.Context()).failed = err
		},
	}
}

// attemptKey is the context key of the request's *proxyAttempt.
type attemptKey struct{}

func attemptOf(ctx context.Context) *proxyAttempt { return ctx.Value(attemptKey{}).(*proxyAttempt) }

// proxyAttempt is one forward of a request to t: its handler goroutine
// sets it up and reads it after the proxy returns; the proxy's hooks, the
// client trace and the timer fill it in meanwhile.
type proxyAttempt struct {
	h      *Handler
	w      http.ResponseWriter
	t      Target
	act    activated
	rid    string
	rec    *access
	p      Policy
	sentAt time.Time
	cancel context.CancelCauseFunc
	trace  httptrace.ClientTrace
	// sent is set once the request header went to the tunnel.
	sent atomic.Bool
	// timer first bounds the wait for the response header (RouteTimeout);
	// once the header is in (streaming set), it is the stream idle
	// timeout, reset by each byte moved (watchIdle). idled makes its
	// stream idle action happen once.
	timer     *time.Timer
	streaming atomic.Bool
	idled     atomic.Bool
	// failed is the error ReverseProxy handed its ErrorHandler; nil if
	// the response was relayed.
	failed error
	// values backs the header values the attempt sets (rewrite,
	// modifyResponse): one-element slices of it, capped, so they need no
	// allocation of their own and an append to one copies instead of
	// overwriting its neighbour. Nothing else writes them.
	values [6]string
}

func (a *proxyAttempt) wroteHeaders() { a.sent.Store(true) }

// fire is the timer's function: the route timeout before the response
// header, the stream idle timeout after it.
func (a *proxyAttempt) fire() {
	if !a.streaming.Load() {
		a.cancel(errRouteTimeout)
		return
	}
	if a.idled.CompareAndSwap(false, true) {
		a.h.logger.Info("stream idle timeout, cutting it", "actor", a.t.Actor,
			"worker", a.t.Worker, "timeout", a.p.StreamIdleTimeout)
		a.cancel(errStreamIdle)
	}
}

// modifyResponse is the proxy's ModifyResponse for this attempt.
func (a *proxyAttempt) modifyResponse(res *http.Response) error {
	a.rec.upstream = time.Since(a.sentAt)
	if !a.timer.Stop() {
		// The timeout fired as the header arrived; the request is
		// already cancelled.
		return errRouteTimeout
	}
	if res.StatusCode == tunnelproto.StatusStale {
		// Surfaces in ErrorHandler before anything is written, so the
		// request can be re-resolved and replayed.
		if res.Header.Get(tunnelproto.HeaderNotServing) != "" {
			return errNodeNotServing
		}
		return errMisdirected
	}
	if kind := res.Header.Get(tunnelproto.HeaderError); kind != "" {
		// The tunnel's words (and marker) are not for the client:
		// classify answers instead.
		return &tunnelError{kind: tunnelproto.ErrorKind(kind), status: res.StatusCode}
	}
	// The timer, stopped above, now watches the stream.
	a.streaming.Store(true)
	a.timer.Reset(a.p.StreamIdleTimeout)
	res.Body = watchIdle(res.Body, a.p.StreamIdleTimeout, a.timer)
	// The router's id replaces any the actor sent: ReverseProxy adds
	// res's headers to w's, which holds the router's id already
	// (ServeHTTP) unless a relayed 1xx cleared w's header.
	res.Header.Del(HeaderRequestID)
	if wh := a.w.Header(); wh.Get(HeaderRequestID) == "" {
		wh.Set(HeaderRequestID, a.rid)
	}
	a.values[3] = a.act.header()
	res.Header[HeaderActivation] = a.values[3:4:4]
	a.h.cfg.Metrics.Request(a.act.how, res.StatusCode)
	if a.act.how != activation.Warm {
		res.Header.Set(HeaderActivationMs, strconv.FormatInt(a.act.waited.Milliseconds(), 10))
	}
	return nil
}

// rewrite points the outbound request at t's tunnel, keeping path, query
// and Host, tells the tunnel which worker and actor incarnation the
// router expects, and passes the request id on (rid, as X-Request-Id).
// The header values are slices of a.values (see there).
func (a *proxyAttempt) rewrite(pr *httputil.ProxyRequest) {
	scheme := "http"
	if a.h.cfg.TunnelTLS != nil {
		scheme = "https"
		// Only the node that registered the worker may answer for it
		// (pki.NodeTransport checks the tunnel's certificate).
		pr.Out = pr.Out.WithContext(tunnelproto.WithNode(pr.Out.Context(), a.t.Node))
	}
	pr.SetURL(&url.URL{Scheme: scheme, Host: a.t.TunnelAddr})
	// The actor's app sees the Host the client used, not the tunnel's.
	pr.Out.Host = pr.In.Host
	// The router is the edge: client-sent X-Forwarded-* (already removed
	// from Out by ReverseProxy) are not trusted, only set afresh; nor
	// are look-alikes of any header the router vouches for.
	stripReserved(pr.Out.Header)
	// Nor as request trailers, which some stacks merge into headers.
	stripReserved(pr.Out.Trailer)
	pr.SetXForwarded()
	// Clients must not pick the worker or incarnation: these replace any
	// client-sent values of these headers. The tunnel logs the request
	// id with any failure, and the actor's app may log it too: one id
	// from client to app.
	a.values[0], a.values[1], a.values[2] = a.t.Worker, a.t.UID, a.rid
	pr.Out.Header[canonicalWorker] = a.values[0:1:1]
	pr.Out.Header[canonicalActorUID] = a.values[1:2:2]
	pr.Out.Header[canonicalXRequestID] = a.values[2:3:3]
	if a.t.Assignment != "" {
		a.values[5] = a.t.Assignment
		pr.Out.Header[canonicalAssignment] = a.values[5:6:6]
	}
	// Only the router says who a caller is.
	delete(pr.Out.Header, canonicalIngressSubject)
	if a.t.Policy.Ingress != auth.IngressPublic {
		// The bearer token was for the router: an actor handed it could
		// replay it (to other actors, or to the API when it is a user's
		// JWT). The actor learns whom it named instead.
		delete(pr.Out.Header, "Authorization")
		a.values[4] = a.act.subject
		pr.Out.Header[canonicalIngressSubject] = a.values[4:5:5]
	}
}

// Canonical forms of the header names rewrite sets by map assignment.
var (
	canonicalWorker     = http.CanonicalHeaderKey(tunnelproto.HeaderWorker)
	canonicalActorUID   = http.CanonicalHeaderKey(tunnelproto.HeaderActorUID)
	canonicalAssignment = http.CanonicalHeaderKey(tunnelproto.HeaderAssignment)
	canonicalXRequestID = http.CanonicalHeaderKey(headerXRequestID)
	// canonicalIngressSubject is HeaderIngressSubject's.
	canonicalIngressSubject = http.CanonicalHeaderKey(HeaderIngressSubject)
)

// isStale reports whether err means the target no longer hosts the actor:
// the tunnel said so (421), or its address could not be dialled (nothing
// listens there, or no host answers: the worker or its node is gone, as
// when a node's Pod is deleted after its actors were checkpointed). A
// failed dial sent nothing, so the request may go again after a fresh
// resolution.
func isStale(err error) bool {
	return errors.Is(err, errMisdirected) || tunnelUnreachable(err)
}

// tunnelUnreachable reports whether err is a failure to connect to a
// worker tunnel (refused, timed out, no route) or to finish the TLS
// handshake with it in time (the node's answers do not arrive): either
// way no byte of the request was sent.
func tunnelUnreachable(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &op) && op.Op == "dial" || tlsHandshakeTimedOut(err)
}

// tlsHandshakeTimedOut reports whether err is http.Transport's
// TLSHandshakeTimeout passing, whose error type is unexported (a
// net.Error that times out, named by its text).
func tlsHandshakeTimedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && strings.Contains(ne.Error(), "TLS handshake timeout")
}
