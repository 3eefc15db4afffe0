package lifecycle

import "errors"

// Errors of the lifecycle's contract; apiserver maps them (and the store's)
// to gRPC codes in one place.
var (
	// ErrFailedPrecondition: the actor's state does not allow the
	// operation (e.g. delete while RUNNING).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrNoCapacity: no worker freed up before the caller's deadline.
	ErrNoCapacity = errors.New("no free worker")
	// ErrResumeFailed: the restore or boot failed; the actor is back in a
	// resumable state with its last snapshot and the worker is free.
	ErrResumeFailed = errors.New("resume failed")
	// ErrSuspendFailed: the checkpoint failed; the actor is CRASHED at its
	// last snapshot and the worker is free.
	ErrSuspendFailed = errors.New("suspend failed")
	// ErrForeignSnapshot: a node reported a durable snapshot of another
	// owner than the one it was asked to write for (reportedRef).
	ErrForeignSnapshot = errors.New("node reported another owner's snapshot")
)
