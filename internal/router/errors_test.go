package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"substrate.dev/ate/internal/coalesce"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/tunnelproto"
)

func TestClassify(t *testing.T) {
	key := names.ActorKey{Atespace: "default", Name: "x"}
	cfg := Config{ParkMax: 7, ParkBudget: 30 * time.Second}.withDefaults()
	wrap := func(err error) error { return fmt.Errorf("resume default/x: %w", err) }
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantBody   string
		wantRetry  bool
		wantGone   bool
	}{
		{"not found", wrap(controlError("NotFound", "actor default/x not found", ErrActorNotFound)),
			404, "actor default/x not found", false, false},
		{"invalid argument hides the server's message", wrap(controlError("InvalidArgument", "bad\nthing in /var/lib/ate", ErrInvalid)),
			400, "invalid request for actor default/x; check its name", false, false},
		{"resource exhausted", wrap(controlError("ResourceExhausted", "busy", ErrNoCapacity)),
			503, "no free worker for actor default/x within 30s; retry later", true, false},
		{"deadline exceeded", wrap(controlError("DeadlineExceeded", "late", ErrNoCapacity, context.DeadlineExceeded)),
			503, "park budget of 30s exhausted: actor default/x was not resumed in time; retry later", true, false},
		{"park budget", wrap(errParkBudget),
			503, "park budget of 30s exhausted: actor default/x was not resumed in time; retry later", true, false},
		{"context deadline", wrap(context.DeadlineExceeded),
			503, "park budget of 30s exhausted: actor default/x was not resumed in time; retry later", true, false},
		{"park full", wrap(errParkFull),
			503, "parking lot full: too many requests are waiting for actors to resume (limit 7); retry shortly", true, false},
		{"failed precondition hides the server's message", wrap(controlError("FailedPrecondition", "actor is DELETING", ErrNotResumable)),
			409, "actor default/x cannot be resumed now (it is being deleted or changed); retry later", false, false},
		{"unavailable hides the server's message", wrap(controlError("Unavailable", "resume failed: gvisor: restore in ate1-w1: exit status 1", ErrResumeFailed)),
			502, "actor default/x could not be resumed; its last snapshot is kept and the next request tries again", false, false},
		{"canceled status", wrap(controlError("Canceled", "", context.Canceled)),
			statusClientClosedRequest, "client closed request", false, true},
		{"canceled context", wrap(context.Canceled),
			statusClientClosedRequest, "client closed request", false, true},
		{"other code hides code and message", wrap(controlError("Internal", "boom", ErrControlPlane)),
			502, "actor default/x could not be resumed; retry later", false, false},
		{"control plane unreachable", wrap(controlError("Unavailable", "connection refused", ErrControlPlane, ErrUnavailable)),
			503, "actor default/x could not be resumed: the control plane is unavailable (restarting or failing over); retry shortly", true, false},
		{"aborted once budget is gone", wrap(controlError("Aborted", "record changed concurrently", ErrConflict)),
			502, "actor default/x could not be resumed; retry later", false, false},
		{"park grace", wrap(errParkGrace),
			503, "park budget of 30s and grace of 10s exhausted: actor default/x was still being restored; retry later", true, false},
		{"stale", fmt.Errorf("%w: %w", errStale, errMisdirected),
			503, "actor default/x moved while the request was in flight; retry", true, false},
		{"tunnel unreachable", errors.New("dial tcp 10.0.0.1:7000: i/o timeout"),
			502, "actor default/x is unreachable; retry later", false, false},
		{"port refused", fmt.Errorf("proxy to worker w1: %w", &tunnelError{kind: tunnelproto.KindRefused, status: 502}),
			502, "actor default/x is not listening on its port, or has just stopped; check that it listens", false, false},
		{"upstream broke", fmt.Errorf("proxy to worker w1: %w", &tunnelError{kind: tunnelproto.KindUpstream, status: 502}),
			502, "actor default/x did not answer on its port; check that it listens and stays up", false, false},
		{"unknown tunnel error kind", fmt.Errorf("proxy to worker w1: %w", &tunnelError{kind: "new-kind", status: 502}),
			502, "actor default/x did not answer on its port; check that it listens and stays up", false, false},
		{"cut", fmt.Errorf("proxy to worker w1: %w", &tunnelError{kind: tunnelproto.KindCut, status: 503}),
			503, "actor default/x is being suspended or has stopped; retry", true, false},
		{"invalid name", fmt.Errorf("header: %w", names.ValidateLabel("atespace", "A")),
			400, `header: invalid name: atespace "A" must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit`, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := classify(tt.err, key, cfg)
			if f.status != tt.wantStatus || f.body != tt.wantBody || f.retryAfter != tt.wantRetry || f.clientGone != tt.wantGone {
				t.Errorf("classify = %+v, want status %d body %q retryAfter %t clientGone %t",
					f, tt.wantStatus, tt.wantBody, tt.wantRetry, tt.wantGone)
			}
			if f.status == http.StatusInternalServerError {
				t.Error("expected conditions never answer 500")
			}
		})
	}
}

func TestClassifyRouteTimeout(t *testing.T) {
	key := names.ActorKey{Atespace: "default", Name: "x"}
	for _, delivered := range []bool{true, false} {
		err := fmt.Errorf("proxy: %w", &routeTimeoutError{timeout: 5 * time.Minute, delivered: delivered})
		f := classify(err, key, Config{}.withDefaults())
		want := failure{reason: "route_timeout", status: http.StatusGatewayTimeout, delivered: fmt.Sprint(delivered),
			body: "actor default/x did not answer within its route timeout of 5m0s"}
		if f != want {
			t.Errorf("delivered=%t: classify = %+v, want %+v", delivered, f, want)
		}
		if !errors.Is(err, errRouteTimeout) {
			t.Errorf("a route timeout is not errRouteTimeout")
		}
	}
}

// TestRetryable: what a request with budget left tries again — attempts
// that ran out of time or were aborted — and what it answers at once.
func TestRetryable(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("resume default/x: %w", err) }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"shared call expired", fmt.Errorf("%w after 30s: %w", coalesce.ErrExpired, errors.New("dial: i/o timeout")), true},
		{"deadline exceeded", wrap(controlError("DeadlineExceeded", "stream terminated by RST_STREAM with error code: CANCEL", ErrNoCapacity, context.DeadlineExceeded)), true},
		{"resource exhausted", wrap(controlError("ResourceExhausted", "no free worker", ErrNoCapacity)), true},
		{"aborted", wrap(controlError("Aborted", "record changed concurrently", ErrConflict)), true},
		{"not found", wrap(controlError("NotFound", "no such actor", ErrActorNotFound)), false},
		{"unavailable", wrap(controlError("Unavailable", "restore failed", ErrResumeFailed)), false},
		{"control plane unreachable", wrap(controlError("Unavailable", "connection refused", ErrControlPlane, ErrUnavailable)), true},
		{"control plane failed", wrap(controlError("Internal", "boom", ErrControlPlane)), false},
		{"failed precondition", wrap(controlError("FailedPrecondition", "deleting", ErrNotResumable)), false},
		{"canceled", wrap(controlError("Canceled", "", context.Canceled)), false},
		{"not a status", errors.New("connection refused"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryable(tt.err); got != tt.want {
				t.Errorf("retryable(%v) = %t, want %t", tt.err, got, tt.want)
			}
		})
	}
}

// TestIsStale: every failure to connect to a worker tunnel — refused,
// unanswered (a deleted Pod's address: seen on a real cluster, where the
// cached target of an actor its node had suspended timed out) or
// unroutable — makes the target stale and the request go again after a
// fresh resolution; a failure after the request was sent does not.
func TestIsStale(t *testing.T) {
	dial := func(err error) error {
		return fmt.Errorf("proxy to worker w: %w", &net.OpError{Op: "dial", Net: "tcp", Err: err})
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"421 from the tunnel", fmt.Errorf("x: %w", errMisdirected), true},
		{"refused", dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), true},
		{"dial timed out", dial(os.ErrDeadlineExceeded), true},
		{"no route to host", dial(os.NewSyscallError("connect", syscall.EHOSTUNREACH)), true},
		{"reset while reading the response", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, false},
		{"route timeout", errRouteTimeout, false},
	} {
		if got := isStale(tc.err); got != tc.want {
			t.Errorf("%s: isStale = %v, want %v", tc.name, got, tc.want)
		}
	}
}
