package router

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"syscall"
)

// forward proxies r to t's tunnel and returns nil once the tunnel's
// response has been relayed to w. On error nothing has been written to w
// (the caller answers): a 421 from the tunnel (errMisdirected), a
// transport error (connection refused, timeouts), or the client going away.
func (h *handler) forward(w http.ResponseWriter, r *http.Request, t Target, act activation) error {
	var failed error
	// A ReverseProxy is a few words of configuration; one per attempt lets
	// the hooks close over this attempt's target and error.
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { rewrite(pr, t) },
		Transport: h.cfg.Transport,
		// Flush every write at once: actors stream (SSE, logs, tokens).
		FlushInterval: -1,
		ErrorLog:      h.errorLog,
		ModifyResponse: func(res *http.Response) error {
			if res.StatusCode == http.StatusMisdirectedRequest {
				// Surfaces in ErrorHandler before anything is written,
				// so the request can be re-resolved and replayed.
				return errMisdirected
			}
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) { failed = err },
	}
	w.Header().Set(HeaderActivation, string(act))
	rp.ServeHTTP(w, r)
	if failed != nil {
		w.Header().Del(HeaderActivation)
		return fmt.Errorf("proxy to worker %s: %w", t.Worker, failed)
	}
	return nil
}

// rewrite points the outbound request at t's tunnel, keeping path, query
// and Host, and tells the tunnel which worker and actor incarnation the
// router expects.
func rewrite(pr *httputil.ProxyRequest, t Target) {
	pr.SetURL(&url.URL{Scheme: "http", Host: t.TunnelAddr})
	// The actor's app sees the Host the client used, not the tunnel's.
	pr.Out.Host = pr.In.Host
	// The router is the edge: client-sent X-Forwarded-* (already removed
	// from Out by ReverseProxy) are not trusted, only set afresh.
	pr.SetXForwarded()
	// Clients must not pick the worker or incarnation: Set replaces any
	// client-sent values of these headers.
	pr.Out.Header.Set(HeaderWorker, t.Worker)
	pr.Out.Header.Set(HeaderActorUID, t.UID)
}

// isStale reports whether err means the target no longer hosts the actor:
// the tunnel said so (421), or nothing listens where it was (the worker or
// its node is gone).
func isStale(err error) bool {
	return errors.Is(err, errMisdirected) || errors.Is(err, syscall.ECONNREFUSED)
}

// replayable reports whether r can be sent again after a failed attempt:
// a safe method with no body (the first attempt may have consumed it).
func replayable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		return false
	}
	return r.ContentLength == 0 && (r.Body == nil || r.Body == http.NoBody)
}
