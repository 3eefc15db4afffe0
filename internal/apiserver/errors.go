package apiserver

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

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
	code := codes.Internal
	switch {
	case errors.Is(err, names.ErrInvalid), errors.Is(err, errInvalid), errors.Is(err, image.ErrBadRef):
		code = codes.InvalidArgument
	case errors.Is(err, store.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, store.ErrAlreadyExists):
		code = codes.AlreadyExists
	case errors.Is(err, store.ErrConflict):
		code = codes.Aborted
	case errors.Is(err, store.ErrNotEmpty), errors.Is(err, lifecycle.ErrFailedPrecondition):
		code = codes.FailedPrecondition
	case errors.Is(err, lifecycle.ErrNoCapacity):
		code = codes.ResourceExhausted
	case errors.Is(err, lifecycle.ErrResumeFailed), errors.Is(err, lifecycle.ErrSuspendFailed):
		code = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

var errInvalid = errors.New("invalid argument")
