package apiserver

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/alarm"
	"substrate.dev/ate/internal/identity"
	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

// The domain's errors become transport codes here, and only here: gRPC
// codes for the Control API (toStatus), HTTP statuses for the actors'
// self-service calls (selfStatus).

// toStatus maps the domain's error contract to gRPC codes: the one place
// where that happens. The message is the wrapped error's text, which names
// the object and what to do.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code, reason := codes.Internal, "INTERNAL"
	switch {
	case errors.Is(err, nodeapi.ErrExecStart):
		code, reason = codes.FailedPrecondition, "EXEC_START_FAILED"
	case errors.Is(err, nodeapi.ErrExecEnded):
		code, reason = codes.FailedPrecondition, "EXEC_ENDED"
	case errors.Is(err, nodeapi.ErrStale):
		// The actor moved or was put away between our read and the call.
		code, reason = codes.FailedPrecondition, "FAILED_PRECONDITION"
	case errors.Is(err, nodeapi.ErrNoFile):
		code, reason = codes.NotFound, "NOT_FOUND"
	case errors.Is(err, nodeapi.ErrExecUnsupported):
		code, reason = codes.Unimplemented, "UNIMPLEMENTED"
	case errors.Is(err, nodeapi.ErrBadPath), errors.Is(err, nodeapi.ErrTooLarge):
		code, reason = codes.InvalidArgument, "INVALID_ARGUMENT"
	case errors.Is(err, names.ErrInvalid), errors.Is(err, errInvalid), errors.Is(err, image.ErrBadRef), errors.Is(err, alarm.ErrInvalid):
		code, reason = codes.InvalidArgument, "INVALID_ARGUMENT"
	case errors.Is(err, store.ErrNotFound):
		code, reason = codes.NotFound, "NOT_FOUND"
	case errors.Is(err, store.ErrAlreadyExists):
		code, reason = codes.AlreadyExists, "ALREADY_EXISTS"
	case errors.Is(err, store.ErrConflict):
		code, reason = codes.Aborted, "CONFLICT"
	case errors.Is(err, snapshot.ErrTreeChanged):
		// The actor kept swapping entries of its volume while a live
		// checkpoint copied it; a retry may find it still.
		code, reason = codes.Aborted, "VOLUME_CHANGED"
	case errors.Is(err, store.ErrFenced):
		// This replica stalled past the actor's lease and another took
		// the actor over: like a conflict, the caller retries and reaches
		// the new state.
		code, reason = codes.Aborted, "LEASE_LOST"
	case errors.Is(err, store.ErrUnavailable):
		// The router and clients key on this reason (router.fromControl).
		code, reason = codes.Unavailable, "STORE_UNAVAILABLE"
	case errors.Is(err, store.ErrNotEmpty), errors.Is(err, lifecycle.ErrFailedPrecondition):
		code, reason = codes.FailedPrecondition, "FAILED_PRECONDITION"
	case errors.Is(err, errTooManyStreams):
		code, reason = codes.ResourceExhausted, "TOO_MANY_STREAMS"
	case errors.Is(err, store.ErrTooMany):
		code, reason = codes.ResourceExhausted, "TOO_MANY"
	case errors.Is(err, errUnimplemented):
		code, reason = codes.Unimplemented, "UNIMPLEMENTED"
	case errors.Is(err, lifecycle.ErrNoCapacity):
		code, reason = codes.ResourceExhausted, "NO_FREE_WORKER"
	case errors.Is(err, errImageUnreadable):
		code, reason = codes.Unavailable, "IMAGE_UNREADABLE"
	case errors.Is(err, lifecycle.ErrNodeUnavailable):
		// The actor's node cannot be reached and is not lost: the
		// actor stays where it is until the node answers or its lease
		// runs out; the router parks on this (router.fromControl).
		code, reason = codes.Unavailable, "NODE_UNAVAILABLE"
	case errors.Is(err, lifecycle.ErrResumeFailed), errors.Is(err, lifecycle.ErrSuspendFailed):
		code, reason = codes.Unavailable, "ACTOR_START_OR_CHECKPOINT_FAILED"
	case errors.Is(err, context.DeadlineExceeded):
		code, reason = codes.DeadlineExceeded, "DEADLINE_EXCEEDED"
	case errors.Is(err, context.Canceled):
		code, reason = codes.Canceled, "CANCELED"
	}
	st := status.New(code, err.Error())
	// The detail marks the status as the server's verdict, so a client can
	// tell "the actor failed to start" (UNAVAILABLE from us) from "the
	// server is unreachable" (UNAVAILABLE from the transport).
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: atev1.ErrorDomain}); derr == nil {
		st = d
	}
	return st.Err()
}

var errInvalid = errors.New("invalid argument")

// errUnimplemented: this API server does not serve the call.
var errUnimplemented = errors.New("not implemented")

// selfStatus maps the domain's error contract to the HTTP status an
// actor's self-service call is answered with (SelfService.Answer; the
// node relays it as is): the one place where that happens. The answer's
// body is the error's text, which says what to change.
func selfStatus(err error) int {
	switch {
	case errors.Is(err, alarm.ErrInvalid), errors.Is(err, identity.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, errUnknownCall):
		return http.StatusNotFound
	case errors.Is(err, nodeapi.ErrNotHosted):
		// The actor moved, was put away, deleted or re-created since
		// its node's gate admitted the call: nothing was done.
		return http.StatusConflict
	case errors.Is(err, store.ErrTooMany):
		return http.StatusTooManyRequests
	case errors.Is(err, identity.ErrNoIssuer), errors.Is(err, store.ErrUnavailable), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrFenced):
		// The actor retries later: the store, or a write that raced
		// another (toStatus's ABORTED), may let the same call through.
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
