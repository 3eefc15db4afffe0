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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"substrate.dev/ate/internal/names"
)

// The router's own failure conditions. Resolver failures are gRPC status
// errors (see Resolver); classify maps both kinds to HTTP.
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
// such answers with HeaderTunnelError) because it could not get an answer
// from the actor. The tunnel logs the cause; its answer is never relayed.
type tunnelError struct {
	// kind is the marker's value: TunnelErrorRefused, TunnelErrorUpstream,
	// TunnelErrorCut, or a kind this router does not know (answered as
	// upstream).
	kind   string
	status int
}

func (e *tunnelError) Error() string {
	return fmt.Sprintf("worker tunnel answered %d %s %q (its log has the cause)", e.status, HeaderTunnelError, e.kind)
}

// keepsTarget reports whether the actor is still where the router sent
// the request: the tunnel admitted it to the worker that hosts the actor,
// and only the actor's app failed to answer. A cut means the actor is
// going (checkpoint or stop), so its target is stale.
func (e *tunnelError) keepsTarget() bool { return e.kind != TunnelErrorCut }

// classify maps any error the request path produces to its HTTP answer.
// It is the only place that does: router sentinels first, then the worker
// tunnel's own answers, then context errors, then gRPC status codes from
// the Resolver. key is the addressed actor (zero when none was); cfg
// supplies the limits named in bodies.
//
// Bodies are for anonymous clients: they say what happened in the
// client's terms and what to do, and are built from fixed texts, the
// actor's name and the router's own limits only. Causes carry interior
// addresses, paths, namespace, worker and runtime names (the tunnel's
// dial errors, the control plane's status messages); they go to the log,
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
		return failure{status: http.StatusGatewayTimeout, delivered: strconv.FormatBool(rte.delivered), body: fmt.Sprintf(
			"actor %s did not answer within its route timeout of %s", actor, rte.timeout)}
	case errors.As(err, &te):
		switch te.kind {
		case TunnelErrorCut:
			return failure{status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
				"actor %s is being suspended or has stopped; retry", actor)}
		case TunnelErrorRefused:
			return failure{status: http.StatusBadGateway, body: fmt.Sprintf(
				"actor %s is not listening on its port, or has just stopped; check that it listens", actor)}
		default:
			return failure{status: http.StatusBadGateway, body: fmt.Sprintf(
				"actor %s did not answer on its port; check that it listens and stays up", actor)}
		}
	case errors.Is(err, errNoActor):
		return failure{status: http.StatusNotFound, body: fmt.Sprintf(
			"no actor addressed: use Host: <name>.<atespace>.%s or header %s: <atespace>/<name>",
			cfg.ActorDomain, HeaderTargetActor)}
	case errors.Is(err, names.ErrInvalid):
		// The router's own validation of what the client sent: it
		// names the client's input and the rule it broke.
		return failure{status: http.StatusBadRequest, body: oneLine(err.Error())}
	case errors.Is(err, errParkFull):
		return failure{status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
			"parking lot full: too many requests are waiting for actors to resume (limit %d); retry shortly", cfg.ParkMax)}
	case errors.Is(err, errParkBudget), errors.Is(err, context.DeadlineExceeded):
		return notResumedInTime(actor, cfg)
	case errors.Is(err, errParkGrace):
		return failure{status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
			"park budget of %s and grace of %s exhausted: actor %s was still being restored; retry later",
			cfg.ParkBudget, cfg.ParkGrace, actor)}
	case errors.Is(err, errStale):
		return failure{status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
			"actor %s moved while the request was in flight; retry", actor)}
	case errors.Is(err, context.Canceled):
		return clientClosed()
	}
	st, ok := grpcStatus(err)
	if !ok {
		// Not from the control plane: the tunnel could not be reached
		// or broke.
		return failure{status: http.StatusBadGateway, body: fmt.Sprintf(
			"actor %s is unreachable; retry later", actor)}
	}
	// The status message is never echoed: a failed restore's names the
	// runtime, the worker's namespace and snapshot paths.
	switch st.Code() {
	case codes.NotFound:
		return failure{status: http.StatusNotFound, body: fmt.Sprintf("actor %s not found", actor)}
	case codes.InvalidArgument:
		// The router validated the name already (names.ErrInvalid
		// above), so this is the control plane refusing something else
		// about the request; its words stay in the log.
		return failure{status: http.StatusBadRequest, body: fmt.Sprintf(
			"invalid request for actor %s; check its name", actor)}
	case codes.ResourceExhausted:
		return failure{status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
			"no free worker for actor %s within %s; retry later", actor, cfg.ParkBudget)}
	case codes.DeadlineExceeded:
		return notResumedInTime(actor, cfg)
	case codes.FailedPrecondition:
		return failure{status: http.StatusConflict, body: fmt.Sprintf(
			"actor %s cannot be resumed now (it is being deleted or changed); retry later", actor)}
	case codes.Unavailable:
		return failure{status: http.StatusBadGateway, body: fmt.Sprintf(
			"actor %s could not be resumed; its last snapshot is kept and the next request tries again", actor)}
	case codes.Canceled:
		return clientClosed()
	default:
		return failure{status: http.StatusBadGateway, body: fmt.Sprintf(
			"actor %s could not be resumed; retry later", actor)}
	}
}

func clientClosed() failure {
	return failure{status: statusClientClosedRequest, clientGone: true, body: "client closed request"}
}

// retryable reports whether err, from a shared Lookup(+Resume), fails only
// that attempt and not the actor: the shared call ran out of its own time
// (errCallExpired); the control plane found no worker before the call's
// deadline (codes.ResourceExhausted, codes.DeadlineExceeded — that deadline
// is the budget of the request that started the call, not of the requests
// that joined it); or it gave up over a concurrent change (codes.Aborted).
// A request with budget left starts another attempt.
func retryable(err error) bool {
	if errors.Is(err, errCallExpired) {
		return true
	}
	st, ok := grpcStatus(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.ResourceExhausted, codes.DeadlineExceeded, codes.Aborted:
		return true
	default:
		return false
	}
}

func notResumedInTime(actor string, cfg Config) failure {
	return failure{status: http.StatusServiceUnavailable, retryAfter: true, body: fmt.Sprintf(
		"park budget of %s exhausted: actor %s was not resumed in time; retry later", cfg.ParkBudget, actor)}
}

// grpcStatus finds the gRPC status in err's chain. Unlike status.FromError
// it returns the status as the server sent it, so its message is not
// prefixed with the router's own wrapping.
func grpcStatus(err error) (*status.Status, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) || se.GRPCStatus() == nil {
		return nil, false
	}
	return se.GRPCStatus(), true
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
	w.WriteHeader(f.status)
	// The client may be gone; there is nobody to tell about a failed write.
	_, _ = io.WriteString(w, f.body+" (request id "+rid+")\n")
}

// WriteTunnelError writes the worker tunnel's own answer for a request it
// could not get answered by the actor: a fixed text by kind (see
// HeaderTunnelError) and the marker, never the cause, which the tunnel
// logs. The router replaces such answers with its own (classify).
func WriteTunnelError(w http.ResponseWriter, kind string) {
	code, body := http.StatusBadGateway, "actor did not answer"
	if kind == TunnelErrorCut {
		// A client talking to the tunnel directly learns to retry too.
		w.Header().Set("Retry-After", "1")
		code, body = http.StatusServiceUnavailable, "actor is being suspended; retry"
	}
	w.Header().Set(HeaderTunnelError, kind)
	http.Error(w, body, code)
}
