package router

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"

	"substrate.dev/ate/internal/names"
)

// HeaderActivation is set on proxied responses: "warm" (the actor was
// running), "resumed" (this request resumed it) or "joined" (it waited on
// another request's resume).
const HeaderActivation = "Ate-Activation"

// NewHandler returns the router's whole request chain, for main and tests
// alike. Stages, outer → inner:
//
//  1. Select the actor: header Ate-Target-Actor ("<atespace>/<name>", or
//     "<name>" in the default atespace) wins over
//     Host "<name>.<atespace>.<ActorDomain>[:port]". Neither: /healthz and
//     /readyz answer 200, anything else 404 explaining both ways. An
//     invalid name: 400 with the validation message.
//  2. Activate: a cached RUNNING target is used at once; otherwise the
//     request parks (at most cfg.ParkMax at once, else 503) for up to
//     cfg.ParkBudget (else 503) on a Lookup and, if the actor is not
//     running, a Resume — one per actor at a time, shared by all waiters
//     and not cancelled when any one of them leaves.
//  3. Proxy to the target's tunnel, streaming. If the tunnel answers 421
//     or refuses the connection, the target is dropped and the actor
//     resolved again once; a GET/HEAD/OPTIONS without body is replayed,
//     anything else gets 503 with Retry-After.
//
// Failures are answered by classify: one text/plain line, never 500 for
// expected conditions. res must be safe for concurrent use; a nil logger
// discards.
func NewHandler(cfg Config, res Resolver, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	return &handler{
		cfg:      cfg,
		act:      newActivator(res, cfg, logger),
		logger:   logger,
		errorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// handler is the chain NewHandler documents. Safe for concurrent use.
type handler struct {
	cfg      Config
	act      *activator
	logger   *slog.Logger
	errorLog *log.Logger
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, err := selectActor(r, h.cfg.ActorDomain)
	if errors.Is(err, errNoActor) && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	if err != nil {
		h.fail(w, key, err, h.logger)
		return
	}
	h.serveActor(w, r, key)
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

// serveActor activates key's actor and proxies r to it, re-resolving once
// when the target turns out stale.
func (h *handler) serveActor(w http.ResponseWriter, r *http.Request, key names.ActorKey) {
	rlog := h.logger.With("actor", key.Name, "atespace", key.Atespace)
	ctx := r.Context()
	t, act, err := h.act.target(ctx, key)
	if err != nil {
		h.fail(w, key, err, rlog)
		return
	}
	err = h.forward(w, r, t, act)
	if err == nil {
		return
	}
	if ctx.Err() == nil {
		// Whatever went wrong, the next request should look again.
		h.act.forget(key, t)
	}
	if !isStale(err) {
		h.fail(w, key, err, rlog.With("worker", t.Worker))
		return
	}
	if !replayable(r) {
		// Resume in the background so the client's retry finds it warm.
		h.act.prewarm(ctx, key)
		h.fail(w, key, fmt.Errorf("%w: %w", errStale, err), rlog.With("worker", t.Worker))
		return
	}
	rlog.Info("actor assignment stale, resolving again", "worker", t.Worker, "err", err)
	t, act, err = h.act.target(ctx, key)
	if err != nil {
		h.fail(w, key, err, rlog)
		return
	}
	err = h.forward(w, r, t, act)
	if err == nil {
		return
	}
	if ctx.Err() == nil {
		h.act.forget(key, t)
	}
	if isStale(err) {
		err = fmt.Errorf("%w: %w", errStale, err)
	}
	h.fail(w, key, err, rlog.With("worker", t.Worker))
}

// fail answers err as classify says and logs it: client errors at debug,
// the router's and the actor's troubles at warn.
func (h *handler) fail(w http.ResponseWriter, key names.ActorKey, err error, rlog *slog.Logger) {
	f := classify(err, key, h.cfg)
	switch {
	case f.clientGone:
		rlog.Debug("client gone", "err", err)
	case f.status >= 500:
		rlog.Warn("request failed", "status", f.status, "err", err)
	default:
		rlog.Debug("request refused", "status", f.status, "err", err)
	}
	writeFailure(w, f)
}
