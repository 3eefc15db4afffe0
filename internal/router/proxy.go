package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

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
	p := t.Policy.withDefaults(h.cfg)
	sentAt := time.Now()
	// Cancelling the outbound request closes its tunnel connection, so a
	// reply that comes late can never be read by another request.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	var sent atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }})
	deadline := time.AfterFunc(p.RouteTimeout, func() { cancel(errRouteTimeout) })
	defer deadline.Stop()

	var failed error
	// A ReverseProxy is a few words of configuration; one per attempt lets
	// the hooks close over this attempt's target, timers and error.
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { rewrite(pr, t, rid) },
		Transport:  h.cfg.Transport,
		BufferPool: h.buffers,
		// FlushInterval 0: responses without a Content-Length (chunked
		// streams) and Server-Sent Events are flushed on every write;
		// responses of known length go out in full buffers, which saves
		// a write per response on ordinary requests.
		ErrorLog: h.errorLog,
		ModifyResponse: func(res *http.Response) error {
			rec.upstream = time.Since(sentAt)
			if !deadline.Stop() {
				// The timeout fired as the header arrived; the
				// request is already cancelled.
				return errRouteTimeout
			}
			if res.StatusCode == tunnelproto.StatusStale {
				// Surfaces in ErrorHandler before anything is written,
				// so the request can be re-resolved and replayed.
				return errMisdirected
			}
			if kind := res.Header.Get(tunnelproto.HeaderError); kind != "" {
				// The tunnel's words (and marker) are not for the
				// client: classify answers instead.
				return &tunnelError{kind: tunnelproto.ErrorKind(kind), status: res.StatusCode}
			}
			res.Body = watchIdle(res.Body, p.StreamIdleTimeout, func() {
				h.logger.Info("stream idle timeout, cutting it", "actor", t.Actor,
					"worker", t.Worker, "timeout", p.StreamIdleTimeout)
				cancel(errStreamIdle)
			})
			// The router's id replaces any the actor sent. w holds it
			// already (ServeHTTP) unless a relayed 1xx cleared w's
			// header; dropped there, as ReverseProxy adds res's
			// headers to w's rather than replacing them.
			res.Header.Set(HeaderRequestID, rid)
			w.Header().Del(HeaderRequestID)
			res.Header.Set(HeaderActivation, act.header())
			h.cfg.Metrics.Request(string(act.how), res.StatusCode)
			if act.how != activationWarm {
				res.Header.Set(HeaderActivationMs, strconv.FormatInt(act.waited.Milliseconds(), 10))
			}
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) { failed = err },
	}
	rp.ServeHTTP(w, r.WithContext(ctx))
	if failed == nil {
		return nil
	}
	if errors.Is(context.Cause(ctx), errRouteTimeout) {
		return &routeTimeoutError{timeout: p.RouteTimeout, delivered: sent.Load()}
	}
	return fmt.Errorf("proxy to worker %s: %w", t.Worker, failed)
}

// rewrite points the outbound request at t's tunnel, keeping path, query
// and Host, tells the tunnel which worker and actor incarnation the
// router expects, and passes the request id on (rid, as X-Request-Id).
func rewrite(pr *httputil.ProxyRequest, t Target, rid string) {
	pr.SetURL(&url.URL{Scheme: "http", Host: t.TunnelAddr})
	// The actor's app sees the Host the client used, not the tunnel's.
	pr.Out.Host = pr.In.Host
	// The router is the edge: client-sent X-Forwarded-* (already removed
	// from Out by ReverseProxy) are not trusted, only set afresh.
	pr.SetXForwarded()
	// Clients must not pick the worker or incarnation: Set replaces any
	// client-sent values of these headers.
	pr.Out.Header.Set(tunnelproto.HeaderWorker, t.Worker)
	pr.Out.Header.Set(tunnelproto.HeaderActorUID, t.UID)
	// The tunnel logs it with any failure, and the actor's app may
	// log it too: one id from client to app.
	pr.Out.Header.Set(headerXRequestID, rid)
}

// isStale reports whether err means the target no longer hosts the actor:
// the tunnel said so (421), or nothing listens where it was (the worker or
// its node is gone).
func isStale(err error) bool {
	return errors.Is(err, errMisdirected) || errors.Is(err, syscall.ECONNREFUSED)
}
