package router

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"syscall"
	"time"

	"substrate.dev/ate/internal/activation"
	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/streams"
	"substrate.dev/ate/internal/tracing"
)

// Activation response headers. HeaderActivation is set on proxied
// responses: "warm" (the actor was running), "resumed" (this request
// resumed it) or "joined" (it waited on another request's resume). When
// the control plane had to evict (checkpoint) another, idle actor to free
// a worker for the resume, "resumed" and "joined" say so with an RFC 8941
// boolean parameter, resumed;evicted, which never names the evicted
// actor: it may be another tenant's, and the client is anyone who
// reaches the router. Without an eviction the value is the bare token,
// so clients comparing it whole keep working; those that want the
// parameter parse the value as a structured-field item.
// HeaderActivationMs, set with "resumed" and "joined", is how long the
// request waited for its actor, in milliseconds. A request sent again
// after a try that resumed or joined (its new target was stale, or its
// node was lost under it) keeps that activation and counts the whole
// wait, though a later try found the actor running (access.carry).
const (
	HeaderActivation   = "Ate-Activation"
	HeaderActivationMs = "Ate-Activation-Ms"
)

// NewHandler returns the router's whole request chain, for main and tests
// alike. Stages, outer → inner:
//
//  0. On a loopback router (cfg.Loopback), a Host that is not localhost,
//     a loopback address or under cfg.ActorDomain: 421 (DNS rebinding).
//  1. Select the actor: header Ate-Target-Actor ("<atespace>/<name>", or
//     "<name>" in the default atespace) wins over
//     Host "<name>.<atespace>.<ActorDomain>[:port]". Neither: /healthz
//     answers 200, /readyz 200 (503 once Drain was called), anything else
//     404 explaining both ways. An invalid name: 400 with the validation
//     message.
//  2. Activate: a cached RUNNING target is used at once; otherwise the
//     request parks (at most cfg.ParkMax at once, else 503) for up to
//     cfg.ParkBudget (else 503; plus cfg.ParkGrace if the actor has a
//     worker by then) on a Lookup and, if the actor is not running, a
//     Resume — one per actor at a time, shared by all waiters and not
//     cancelled when any one of them leaves.
//  3. Proxy to the target's tunnel, streaming both ways (full duplex,
//     upgrades), with the actor's route timeout (504 +
//     Ate-Request-Delivered) and stream idle timeout. If the tunnel
//     answers 421 or refuses the connection, the target is dropped and
//     the actor resolved again once; a GET/HEAD/OPTIONS without body is
//     replayed, anything else gets 503 with Retry-After. An answer the
//     tunnel made itself (tunnelproto.HeaderError: the actor's port refused or
//     broke, or the request was cut by a checkpoint) is replaced by the
//     router's own; the actor's own answers, errors included, pass
//     through untouched.
//
// Every response carries HeaderRequestID (a sane incoming X-Request-Id,
// else a new id), which is also sent on to the actor as X-Request-Id.
// Failures are answered by classify: one text/plain line ending in the
// request id, never 500 for expected conditions, never the cause (logged
// once, with the id). Each request but /healthz and /readyz also gets one
// access log record (AccessLogMessage) when it ends. With tracing on
// (internal/tracing), the chain runs inside otelhttp's server span,
// parking has a span of its own, and proxied requests carry a client
// span and traceparent to the actor. res must be safe for concurrent use; a nil logger
// discards. Idle handling and activity reports need Handler.Start.
func NewHandler(cfg Config, res Resolver, logger *slog.Logger) *Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	// With tracing on, a client span per proxied request, and the
	// actor's app receives the traceparent.
	cfg.Transport = tracing.Transport(cfg.Transport)
	h := &Handler{
		cfg:      cfg,
		act:      newActivator(res, cfg, logger),
		buffers:  httpserve.NewBufferPool(),
		logger:   logger,
		errorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	h.proxy = h.newReverseProxy()
	h.serve = tracing.Handler(http.HandlerFunc(h.serveHTTP), "router")
	return h
}

// Handler is the chain NewHandler documents; Start runs its background
// work (idle.go). Safe for concurrent use.
type Handler struct {
	// serve is serveHTTP, wrapped in otelhttp's span when tracing is on.
	serve    http.Handler
	cfg      Config
	act      *activator
	proxy    *httputil.ReverseProxy
	buffers  httputil.BufferPool
	logger   *slog.Logger
	errorLog *log.Logger
	// draining is set by Drain; inflight counts ServeHTTP calls, upgraded
	// connections included (their ServeHTTP lasts as long as they do).
	draining atomic.Bool
	inflight atomic.Int64
}

var _ httpserve.Drainer = (*Handler)(nil)

// Drain makes /readyz answer 503 from now on, so load balancers take the
// router out of rotation; requests are still served, except listening
// streams held for a sleeping actor (hold.go): those are answered 503
// with Retry-After, now and from now on, so their clients reconnect
// through another router instead of holding the drain up.
func (h *Handler) Drain() {
	h.draining.Store(true)
	h.act.drain()
}

// ErrDraining is Ready's answer once Drain was called.
var ErrDraining = errors.New("draining: finishing in-flight and parked requests before exit")

// Ready is nil until Drain is called, then ErrDraining: the management
// listener's /readyz, which readiness probes ask.
func (h *Handler) Ready() error {
	if h.draining.Load() {
		return ErrDraining
	}
	return nil
}

// InFlight returns how many requests are being served: parked, proxied,
// streaming or upgraded.
func (h *Handler) InFlight() int64 { return h.inflight.Load() }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.serve.ServeHTTP(w, r) }

// serveHTTP is ServeHTTP inside the tracing instrumentation.
func (h *Handler) serveHTTP(w http.ResponseWriter, r *http.Request) {
	h.inflight.Add(1)
	defer h.inflight.Add(-1)
	rid := requestID(r)
	w.Header().Set(HeaderRequestID, rid)
	if h.cfg.Loopback && !loopbackHost(r.Host, h.cfg.ActorDomain) {
		rec := &access{start: time.Now(), out: countingWriter{ResponseWriter: w}}
		defer rec.log(h.logger, r, rid)
		h.fail(&rec.out, names.ActorKey{}, Target{}, activation.None, rid, fmt.Errorf("host %q: %w", r.Host, errForeignHost))
		return
	}
	key, err := selectActor(r, h.cfg.ActorDomain)
	if errors.Is(err, errNoActor) && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if r.URL.Path == "/readyz" && h.draining.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "draining\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	rec := &access{start: time.Now(), key: key, out: countingWriter{ResponseWriter: w}}
	defer rec.log(h.logger, r, rid)
	w = &rec.out
	if err != nil {
		h.fail(w, key, Target{}, activation.None, rid, err)
		return
	}
	if hasBody(r) {
		rec.in.ReadCloser = r.Body
		r.Body = &rec.in
	}
	h.serveActor(w, r, key, rid, rec)
}

// selectActor finds the actor r addresses. Errors: errNoActor, or a
// validation error wrapping names.ErrInvalid.
func selectActor(r *http.Request, domain string) (names.ActorKey, error) {
	if v := r.Header.Get(HeaderTargetActor); v != "" {
		key, err := names.ParseActorKey(v, names.DefaultAtespace)
		if err != nil {
			return names.ActorKey{}, fmt.Errorf("header %s: %w", HeaderTargetActor, err)
		}
		return key, nil
	}
	key, ok, err := names.ParseHost(r.Host, domain)
	if err != nil {
		return names.ActorKey{}, fmt.Errorf("host %q: %w", r.Host, err)
	}
	if !ok {
		return names.ActorKey{}, errNoActor
	}
	return key, nil
}

// serveActor activates key's actor and proxies r (request id rid) to it,
// re-resolving once when the target turns out stale.
func (h *Handler) serveActor(w http.ResponseWriter, r *http.Request, key names.ActorKey, rid string, rec *access) {
	if r.ProtoMajor == 1 && http.NewResponseController(w).EnableFullDuplex() == nil {
		// Full duplex streams the request body to the actor while its
		// response streams back (HTTP/2 always does); without it an
		// HTTP/1 server reads the whole body before the first response
		// byte. Closing the body before returning works around
		// golang/go#68560: a body nobody read (the tunnel refused the
		// connection) is otherwise drained after the handler, racing
		// the read of the next request on the connection.
		defer r.Body.Close()
	}
	var body *replayBody
	if hasBody(r) {
		body = newReplayBody(r.Body)
		r.Body = body
	}
	cred := credentials{guard: h.act.guard, atespace: key.Atespace, authorization: r.Header.Get("Authorization")}
	t, how, err := h.attempt(w, r, key, rid, rec, cred)
	// A node that serves nothing does not count as a stale try: its
	// requests park (downTunnels) until the control plane welcomes it
	// again or places its actors elsewhere, bounded by the park budget.
	for tries := 1; err != nil && t.Worker != "" && (isStale(err) || h.lostWithNode(r, t, err)) && tries <= maxStaleRetries; tries++ {
		if errors.Is(err, errNodeNotServing) {
			tries--
		}
		if body != nil {
			// The actor never saw the request: send it again if the
			// router still holds all of its body that was read.
			again, ok := body.rewind()
			if !ok {
				// Resume in the background so the client's retry finds it warm.
				h.act.prewarm(r.Context(), key, cred)
				break
			}
			r.Body = again
		}
		// Routine after every suspend or pause: the cached target is
		// gone. Again only when a checkpoint took the actor away right
		// after the resume this request waited for (a pause or
		// suspend queued behind it).
		h.requestLog(key, t, rid).Debug("actor assignment stale, resolving again", "err", err, "try", tries)
		t, how, err = h.attempt(w, r, key, rid, rec, cred)
	}
	if err == nil {
		return
	}
	if t.Worker != "" && isStale(err) {
		err = fmt.Errorf("%w: %w", errStale, err)
	}
	h.fail(w, key, t, how, rid, err)
}

// lostWithNode reports whether r, sent to t, broke because t's node
// died under it: the tunnel connection broke before any answer, and the
// tunnel now refuses connections (or none can be made). Whatever the
// actor did with r went with the node's sandbox: the control plane
// restores the actor from its last durable snapshot, which r's effects
// are not in. So a request of an idempotent method (RFC 9110, section
// 9.2.2) is sent again once the actor is recovered (its tunnel is marked
// down, so it parks until then), instead of answering 502. Others are
// answered as before: their client decides. A node only cut off from
// this router for a moment may yet have run r, and then runs it again,
// which an idempotent method allows.
func (h *Handler) lostWithNode(r *http.Request, t Target, err error) bool {
	if !idempotentMethod(r.Method) || r.Context().Err() != nil || !brokenBeforeAnswer(err) {
		return false
	}
	if h.act.down.probeOf()(r.Context(), t.TunnelAddr) == nil {
		return false // the node is there: it may have answered
	}
	h.act.tunnelGone(t)
	return true
}

// brokenBeforeAnswer reports whether err is a tunnel connection that
// broke under a request: reset or closed by the peer (read), or closed
// while the request's body was still being written (the transport
// closes it once the read fails).
func brokenBeforeAnswer(err error) bool {
	for _, e := range []error{syscall.ECONNRESET, syscall.EPIPE, net.ErrClosed, io.EOF, io.ErrUnexpectedEOF} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// idempotentMethod: RFC 9110, section 9.2.2.
func idempotentMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// maxStaleRetries bounds how often one request is sent again after the
// tunnel said its target was stale. Each retry waits for the actor's
// resume, which waits for the checkpoint that made the target stale, so
// only a client racing checkpoints against its own requests gets through
// all of them.
const maxStaleRetries = 4

// requestLog is the logger for request rid to key that failed on t (zero
// when activation failed). It is built only when there is something to
// log, keeping the attributes' formatting off the path of requests that
// succeed.
func (h *Handler) requestLog(key names.ActorKey, t Target, rid string) *slog.Logger {
	if t.Worker == "" {
		return h.logger.With("request_id", rid, "actor", key)
	}
	return h.logger.With("request_id", rid, "actor", key, "worker", t.Worker)
}

// attempt activates key's actor and forwards r to it once, counting the
// request as activity while it runs. On error nothing has been written
// to w, and t is dropped from the cache unless the client left or the
// actor is still where it was (it was slow, or its app did not answer);
// t is the target tried, zero when activation failed, and how its
// activation (activation.None when it failed). cred are the request's
// credentials, checked against the actor's ingress policy before
// anything else.
func (h *Handler) attempt(w http.ResponseWriter, r *http.Request, key names.ActorKey, rid string, rec *access, cred credentials) (Target, activation.Kind, error) {
	listen := streams.IsListen(r)
	t, act, err := h.act.target(r.Context(), key, listen, cred)
	rec.wait += act.waited
	if err != nil {
		return Target{}, activation.None, err
	}
	act = rec.carry(act)
	// Deferred: a stream cut mid-way ends the handler with a panic
	// (http.ErrAbortHandler), and the request must still stop counting.
	defer h.act.done(key, listen)
	h.cfg.Metrics.Open(1)
	defer h.cfg.Metrics.Open(-1)
	err = h.forward(w, r, t, act, rid, rec)
	if err != nil && r.Context().Err() == nil && !errors.Is(err, errRouteTimeout) && !appFailed(err) {
		// Whatever went wrong, the next request should look again. A
		// slow actor, or one whose app did not answer, is still where
		// it was: looking again would only load the control plane
		// with a lookup per request to a broken app.
		h.act.forget(key, t)
		switch {
		case tunnelUnreachable(err):
			// Nothing answers at the tunnel address: its node restarted
			// elsewhere (another port) or is gone.
			h.act.tunnelGone(t)
		case errors.Is(err, errNodeNotServing):
			h.act.down.markNotServing(t.TunnelAddr)
		}
	}
	return t, act.how, err
}

// appFailed reports whether err is the tunnel saying the actor's app did
// not answer, with the actor still on its worker.
func appFailed(err error) bool {
	var te *tunnelError
	return errors.As(err, &te) && te.keepsTarget()
}

// fail answers err, for request rid to key that failed on t (zero when
// activation failed, how then activation.None), as classify says, counts
// it, and logs it once with the full cause: a client that left at debug;
// the client's own mistakes (no actor addressed, an invalid name, an
// unknown actor) at info, as anyone can send those in bulk; the
// router's, the control plane's and the actor's troubles at warn.
func (h *Handler) fail(w http.ResponseWriter, key names.ActorKey, t Target, how activation.Kind, rid string, err error) {
	f := classify(err, key, h.cfg)
	h.cfg.Metrics.Request(how, f.status)
	h.cfg.Metrics.Failure(f.reason)
	rlog := h.requestLog(key, t, rid)
	switch {
	case f.clientGone:
		rlog.Debug("client gone", "err", err)
	case f.status == http.StatusBadRequest || f.status == http.StatusNotFound || f.status == http.StatusUnauthorized ||
		f.status == http.StatusMisdirectedRequest:
		rlog.Info("request refused", "status", f.status, "err", err)
	default:
		rlog.Warn("request failed", "status", f.status, "err", err)
	}
	writeFailure(w, f, rid)
}
