package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/netns"
	"substrate.dev/ate/internal/nodeapi"
)

// SelfServiceAddr is the well-known address an actor calls, from inside
// its sandbox, to ask for its own suspension: the worker's gateway, which
// only that worker's sandbox can reach.
//
//	POST http://169.254.17.1/v1/suspend   → 202, the actor is suspended
//	POST http://169.254.17.1/v1/pause     → 202, the actor is paused
//	POST http://169.254.17.1/v1/alarms    → 201 {"id": …}, an alarm is set
//	     body {"at": RFC 3339 | "in": "10m", "path": "/tick"} (docs/alarms.md)
//	POST http://169.254.17.1/v1/token     → 200 {"token": JWT, "expiresAt": RFC 3339}
//	     body {"audience": "…"} or none (docs/security.md, Actor identity)
//
// Every call acts on the actor the API server's record store assigns to
// this worker, with the incarnation (uid) the worker's gate admits: a
// call that arrives after the actor moved is refused (409), never
// applied to the moved actor or to the worker's next one.
//
// The answer comes before the checkpoint starts; in-flight requests drain
// as for any suspend.
//
// Each worker's endpoint is bounded on its own (SelfServiceLimits): a
// connection over its cap is answered 503, a call over its actor's rate
// 429 with Retry-After, and slow or idle connections are closed.
const SelfServiceAddr = "169.254.17.1:80"

// maxSelfBody bounds a self-service call's body: an alarm's path of at
// most 1 KiB and its time, or a token's audience of at most 256 bytes,
// fit well within it.
const maxSelfBody = 4 << 10

// ServeSelfService listens on SelfServiceAddr in every worker's outer
// namespace and serves the self-service API until ctx ends; it returns
// once every listener is closed and its server goroutine has ended.
// Sandbox classes without namespaces (fake) have nothing to serve and
// wait for ctx alone.
func (n *Node) ServeSelfService(ctx context.Context) error {
	var call nodeapi.SelfCallFunc
	if u := n.up(); u != nil {
		call = u.SelfCall
	}
	ss := selfService{log: n.log, call: call, limits: selfServiceLimits{SelfServiceLimits: n.cfg.SelfService},
		metrics: n.cfg.Metrics}
	defer ss.close()
	for _, name := range n.order {
		s := n.slots[name]
		if s.sb.DialNetNSPath == "" {
			continue
		}
		if err := ss.serve(s); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

// selfService is the self-service endpoint of a node's workers: one HTTP
// server per worker, in its outer namespace, asking call about the actor
// the worker's gate admits, each bounded by limits on its own (a worker
// that floods its endpoint is refused, the others are not). It reads
// nothing else of the node. Not safe for concurrent use:
// ServeSelfService owns it.
type selfService struct {
	log *slog.Logger
	// call answers every call (the node's Uplink); nil answers 501.
	call   nodeapi.SelfCallFunc
	limits selfServiceLimits
	// metrics counts refusals; nil counts none. Refusals are not logged:
	// a flood would flood the log.
	metrics *metrics.Node
	servers []*http.Server
	serving sync.WaitGroup
}

// serve starts s's server in s's outer namespace.
func (ss *selfService) serve(s *slot) error {
	ln, err := netns.Listen(s.sb.DialNetNSPath, "tcp", SelfServiceAddr)
	if err != nil {
		return err
	}
	ss.serveOn(s, ln)
	return nil
}

// serveOn starts s's server on ln, within ss.limits: at most MaxConns
// connections (capListener), each cut when its request is not read in
// time or it idles, and calls at most at Rate (handler).
func (ss *selfService) serveOn(s *slot, ln net.Listener) {
	l := ss.limits.withDefaults()
	srv := &http.Server{Handler: ss.handler(s),
		ReadHeaderTimeout: l.readHeaderTimeout, ReadTimeout: l.readTimeout, IdleTimeout: l.idleTimeout,
		// Requests are small; so are the headers a client needs.
		MaxHeaderBytes: 16 << 10,
		// net/http's complaints about what an actor sends stay
		// structured log lines.
		ErrorLog: slog.NewLogLogger(ss.log.With("worker", s.name).Handler(), slog.LevelDebug)}
	ln = newCapListener(ln, l.MaxConns, func() { ss.metrics.SelfServiceRefused(metrics.SelfRefusedConnections) })
	ss.servers = append(ss.servers, srv)
	ss.serving.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			ss.log.Warn("self-service stopped", "worker", s.name, "err", err)
		}
	})
}

// close closes every server and waits for their goroutines.
func (ss *selfService) close() {
	for _, srv := range ss.servers {
		_ = srv.Close()
	}
	ss.serving.Wait()
}

// handler is s's endpoint: every call first within ss.limits' rate
// (limitCalls), then to its route.
func (ss *selfService) handler(s *slot) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/alarms", func(w http.ResponseWriter, r *http.Request) {
		if ss.call == nil {
			http.Error(w, "alarms are not available from this node's self-service endpoint; set them with the Control API (ate alarm)", http.StatusNotImplemented)
			return
		}
		ss.relay(w, r, s, http.StatusCreated, nodeapi.SelfCallAlarms)
	})
	mux.HandleFunc("POST /v1/token", func(w http.ResponseWriter, r *http.Request) {
		if ss.call == nil {
			http.Error(w, "identity tokens are not available from this node's self-service endpoint", http.StatusNotImplemented)
			return
		}
		ss.relay(w, r, s, http.StatusOK, nodeapi.SelfCallToken)
	})
	mux.HandleFunc("POST /v1/{action}", func(w http.ResponseWriter, r *http.Request) {
		action, err := checkpoint.ParseAction(r.PathValue("action"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		if ss.call == nil {
			http.Error(w, action.String()+" is not available from this node's self-service endpoint; use the Control API (ate "+action.String()+")", http.StatusNotImplemented)
			return
		}
		ss.relay(w, r, s, -1, action.String())
	})
	return limitCalls(s, ss.limits.withDefaults(), func() { ss.metrics.SelfServiceRefused(metrics.SelfRefusedRate) }, mux)
}

// relay answers r with ss.call's verdict on call for the actor s's gate
// admits (409 when none), given the request's body; the answer is JSON
// when its status is jsonOK, plain text otherwise.
func (ss *selfService) relay(w http.ResponseWriter, r *http.Request, s *slot, jsonOK int, call string) {
	uid := s.gate.hosted()
	if uid == "" {
		http.Error(w, "this worker hosts no actor", http.StatusConflict)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSelfBody))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		http.Error(w, fmt.Sprintf("request body: %v (at most %d bytes)", err, maxSelfBody), http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		// Not sent in time (the server's read timeout) or cut short.
		http.Error(w, fmt.Sprintf("request body: %v", err), http.StatusBadRequest)
		return
	}
	status, answer := ss.call(r.Context(), s.name, uid, call, body)
	if status == jsonOK {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}
