package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"substrate.dev/ate/internal/coalesce"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/tunnelproto"
)

// The router's own failure conditions. Resolver failures are the
// sentinels in resolver.go; classify maps both kinds to HTTP.
var (
	// errNoActor: the request names no actor (neither Host nor header).
	errNoActor = errors.New("no actor addressed")
	// errParkFull: ParkMax requests are already waiting for resumes.
	errParkFull = errors.New("too many parked requests")
	// errParkBudget: the request waited ParkBudget for its actor, which
	// had no worker yet.
	errParkBudget = errors.New("park budget exhausted")
	// errParkGrace: the request waited ParkBudget and then ParkGrace for
	// an actor that was being restored.
	errParkGrace = errors.New("park grace exhausted")
	// errRouteTimeout: the actor sent no response header within the
	// route timeout (see routeTimeoutError).
	errRouteTimeout = errors.New("route timeout")
	// errStreamIdle: a response body or upgraded connection was silent
	// for the stream idle timeout and was cut.
	errStreamIdle = errors.New("stream idle timeout")
	// errStale: the tunnel said the actor is no longer on that worker and
	// the request could not be (or was already) retried.
	errStale = errors.New("stale actor assignment")
	// errMisdirected: the tunnel answered 421 Misdirected Request.
	errMisdirected = errors.New("tunnel answered 421 Misdirected Request")
	// errNodeNotServing: the 421 said the whole node serves nothing now
	// (tunnelproto.HeaderNotServing).
	errNodeNotServing = fmt.Errorf("%w: the node serves nothing now (its lease ran out)", errMisdirected)
)

// statusClientClosedRequest is nginx's convention for "the client went
// away before the answer"; nobody reads it, but it keeps such requests out
// of 5xx counts.
const statusClientClosedRequest = 499

// failure is how the router answers one error.
type failure struct {
	status int
	// body is one line of text/plain telling the client what to do.
	body string
	// retryAfter adds "Retry-After: 1": the condition is transient.
	retryAfter bool
	// clientGone: nobody is listening; log quietly.
	clientGone bool
	// delivered, when set, is sent as HeaderRequestDelivered.
	delivered string
	// reason is the failure's ate_router_failures_total reason
	// (metrics.FailureReasons).
	reason string
	// challenge, when set, is sent as WWW-Authenticate (a 401).
	challenge string
}

// HeaderRequestDelivered is set on a 504 Gateway Timeout: "true" when the
// request had been handed to the actor's worker (the actor may have acted
// on it, so only an idempotent request is safe to retry), "false" when it
// never left the router.
const HeaderRequestDelivered = "Ate-Request-Delivered"

// routeTimeoutError: the actor did not answer within its route timeout.
// It unwraps to errRouteTimeout.
type routeTimeoutError struct {
	timeout   time.Duration
	delivered bool
}

func (e *routeTimeoutError) Error() string {
	return fmt.Sprintf("no response within the route timeout of %s (request delivered: %t)", e.timeout, e.delivered)
}

func (e *routeTimeoutError) Unwrap() error { return errRouteTimeout }

// tunnelError: the worker tunnel answered the request itself (it marks
// such answers with tunnelproto.HeaderError) because it could not get an
// answer from the actor. The tunnel logs the cause; its answer is never
// relayed.
type tunnelError struct {
	// kind is the marker's value: one of tunnelproto's kinds, or a kind
	// this router does not know (answered as upstream).
	kind   tunnelproto.ErrorKind
	status int
}

func (e *tunnelError) Error() string {
	return fmt.Sprintf("worker tunnel answered %d %s %q (its log has the cause)", e.status, tunnelproto.HeaderError, e.kind)
}

// keepsTarget reports whether the actor is still where the router sent
// the request: the tunnel admitted it to the worker that hosts the actor,
// and only the actor's app failed to answer. A cut means the actor is
// going (checkpoint or stop), so its target is stale.
func (e *tunnelError) keepsTarget() bool { return e.kind != tunnelproto.KindCut }

// classify maps any error the request path produces to its HTTP answer.
// It is the only place that does: the worker tunnel's own answers and
// router sentinels first, then context errors, then the Resolver's
// sentinels (resolver.go). key is the addressed actor (zero when none
// was); cfg supplies the limits named in bodies.
//
// Bodies are for anonymous clients: they say what happened in the
// client's terms and what to do, and are built from fixed texts, the
// actor's name and the router's own limits only. Causes carry interior
// addresses, paths, namespace, worker and runtime names (the tunnel's
// dial errors, the control plane's messages); they go to the log,
// which the request id in every body (writeFailure) points to. The one
// exception is names.ErrInvalid, whose message is the router's own
// validation of the name the client sent.
func classify(err error, key names.ActorKey, cfg Config) failure {
	actor := key.String()
	var (
		rte *routeTimeoutError
		te  *tunnelError
	)
	switch {
	case errors.As(err, &rte):
		return failure{reason: "route_timeout", status: http.StatusGatewayTimeout, delivered: strconv.FormatBool(rte.delivered), body: fmt.Sprintf(
			"actor %s did not answer within its route timeout of %s", actor, rte.timeout)}
	case errors.As(err, &te):
		switch te.kind {
		case tunnelproto.KindCut:
			return failure{reason: "tunnel_cut", status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
				"actor %s is being suspended or has stopped; retry", actor)}
		case tunnelproto.KindRefused:
			return failure{reason: "app_refused", status: http.StatusBadGateway, body: fmt.Sprintf(
				"actor %s is not listening on its port, or has just stopped; check that it listens", actor)}
		default:
			return failure{reason: "app_error", status: http.StatusBadGateway, body: fmt.Sprintf(
				"actor %s did not answer on its port; check that it listens and stays up", actor)}
		}
	case errors.Is(err, errForeignHost):
		// 421 (RFC 9110 section 15.5.20): this server does not answer
		// for that authority. Not 403: no credential would change it.
		return failure{reason: "foreign_host", status: http.StatusMisdirectedRequest, body: fmt.Sprintf(
			"this router listens on loopback only and serves Host localhost, a loopback address or *.%s", cfg.ActorDomain)}
	case errors.Is(err, errNoActor):
		return failure{reason: "no_actor", status: http.StatusNotFound, body: fmt.Sprintf(
			"no actor addressed: use Host: <name>.<atespace>.%s or header %s: <atespace>/<name>",
			cfg.ActorDomain, HeaderTargetActor)}
	case errors.Is(err, names.ErrInvalid):
		// The router's own validation of what the client sent: it
		// names the client's input and the rule it broke.
		return failure{reason: "invalid", status: http.StatusBadRequest, body: oneLine(err.Error())}
	case errors.Is(err, errParkFull):
		return failure{reason: "park_full", status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
			"parking lot full: too many requests are waiting for actors to resume (limit %d); retry shortly", cfg.ParkMax)}
	case errors.Is(err, errNodeUnreachable):
		return failure{reason: "node_unreachable", status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
			"actor %s is on a node that cannot be reached and was not recovered elsewhere within the park budget of %s; retry later",
			actor, cfg.ParkBudget)}
	case errors.Is(err, errParkBudget), errors.Is(err, context.DeadlineExceeded):
		return notResumedInTime(actor, cfg)
	case errors.Is(err, errParkGrace):
		return failure{reason: "park_grace", status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
			"park budget of %s and grace of %s exhausted: actor %s was still being restored; retry later",
			cfg.ParkBudget, cfg.ParkGrace, actor)}
	case errors.Is(err, errStale):
		return failure{reason: "stale", status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
			"actor %s moved while the request was in flight; retry", actor)}
	case errors.Is(err, errHeldDrain):
		return failure{reason: "held_draining", status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
			"this router is shutting down while actor %s sleeps; reconnect the stream", actor)}
	case errors.Is(err, errNoBearer):
		return failure{reason: "unauthorized", status: http.StatusUnauthorized, challenge: `Bearer realm="ate"`, body: fmt.Sprintf(
			"actor %s requires a bearer token: send Authorization: Bearer <token>", actor)}
	case errors.Is(err, errBearerRefused):
		// RFC 6750 section 3: a token was sent and is not accepted.
		return failure{reason: "unauthorized", status: http.StatusUnauthorized, challenge: `Bearer realm="ate", error="invalid_token"`,
			body: fmt.Sprintf("bearer token not accepted for actor %s", actor)}
	case errors.Is(err, context.Canceled):
		return clientClosed()
	}
	return classifyResolver(err, actor, cfg)
}

// classifyResolver is classify for the Resolver's sentinels; anything else
// is the tunnel's connection failing. The control plane's messages are
// never echoed: a failed restore's names the runtime, the worker's
// namespace and snapshot paths.
func classifyResolver(err error, actor string, cfg Config) failure {
	switch {
	case errors.Is(err, ErrActorNotFound):
		return failure{reason: "not_found", status: http.StatusNotFound, body: fmt.Sprintf("actor %s not found", actor)}
	case errors.Is(err, ErrInvalid):
		// The router validated the name already (names.ErrInvalid
		// above), so this is the control plane refusing something else
		// about the request; its words stay in the log.
		return failure{reason: "invalid", status: http.StatusBadRequest, body: fmt.Sprintf(
			"invalid request for actor %s; check its name", actor)}
	case errors.Is(err, ErrNoCapacity):
		// Not the call's deadline passing, which also matches
		// context.DeadlineExceeded (notResumedInTime, in classify): the
		// control plane said there is no worker before that.
		return failure{reason: "no_capacity", status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
			"no free worker for actor %s within %s; retry later", actor, cfg.ParkBudget)}
	case errors.Is(err, ErrNotResumable):
		return failure{reason: "not_resumable", status: http.StatusConflict, body: fmt.Sprintf(
			"actor %s cannot be resumed now (it is being deleted or changed); retry later", actor)}
	case errors.Is(err, ErrResumeFailed):
		return failure{reason: "resume_failed", status: http.StatusBadGateway, body: fmt.Sprintf(
			"actor %s could not be resumed; its last snapshot is kept and the next request tries again", actor)}
	case errors.Is(err, ErrUnavailable):
		return failure{reason: "control_plane_unavailable", status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
			"actor %s could not be resumed: the control plane is unavailable (restarting or failing over); retry shortly", actor)}
	case errors.Is(err, ErrConflict), errors.Is(err, ErrControlPlane):
		return failure{reason: "control_plane", status: http.StatusBadGateway, body: fmt.Sprintf(
			"actor %s could not be resumed; retry later", actor)}
	default:
		// Not from the control plane: the tunnel could not be reached
		// or broke.
		return failure{reason: "upstream", status: http.StatusBadGateway, body: fmt.Sprintf(
			"actor %s is unreachable; retry later", actor)}
	}
}

func clientClosed() failure {
	return failure{reason: "client_gone", status: statusClientClosedRequest, clientGone: true, body: "client closed request"}
}

// retryable reports whether err, from a shared Lookup(+Resume), fails only
// that attempt and not the actor: the shared call ran out of its own time
// (coalesce.ErrExpired); the control plane found no worker before the call's
// deadline (ErrNoCapacity — that deadline is the budget of the request that
// started the call, not of the requests that joined it); or it gave up over
// a concurrent change (ErrConflict); or no API server replica, or no
// store, could be reached (ErrUnavailable: a restart or failover). A
// request with budget left starts another attempt.
func retryable(err error) bool {
	return errors.Is(err, coalesce.ErrExpired) || errors.Is(err, ErrNoCapacity) || errors.Is(err, ErrConflict) ||
		errors.Is(err, ErrUnavailable) || errors.Is(err, errNodeUnreachable)
}

func notResumedInTime(actor string, cfg Config) failure {
	return failure{reason: "park_budget", status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
		"park budget of %s exhausted: actor %s was not resumed in time; retry later", cfg.ParkBudget, actor)}
}

// oneLine keeps a message on one line of the text/plain body.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// writeFailure writes f as the response, ending its body with the
// request id (which the log line with the cause carries too). Nothing may
// have been written to w yet; a failed attempt leaves no activation
// headers on w, since forward sets them on the actor's response (copied
// to w only once it is relayed).
func writeFailure(w http.ResponseWriter, f failure, rid string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	// Set again: a 1xx response relayed before the failure cleared w's
	// header (httputil.ReverseProxy does).
	h.Set(HeaderRequestID, rid)
	if f.retryAfter {
		h.Set("Retry-After", "1")
	}
	if f.delivered != "" {
		h.Set(HeaderRequestDelivered, f.delivered)
	}
	if f.challenge != "" {
		h.Set("WWW-Authenticate", f.challenge)
	}
	w.WriteHeader(f.status)
	// The client may be gone; there is nobody to tell about a failed write.
	_, _ = io.WriteString(w, f.body+" (request id "+rid+")\n")
}
