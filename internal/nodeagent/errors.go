package nodeagent

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/snapshot"
)

// The one map between the node's errors and gRPC codes, used both ways:
// the agent sends a node error as its code (toStatus) and the API server's
// client turns the code back into the same sentinel (fromStatus), so
// errors.Is works across the wire and the message reaches the actor's
// record unchanged.
//
// An entry with a reason shares its code with another and is told apart
// by an ErrorInfo detail carrying the reason; those come first so that
// toStatus picks them over the plain code.
var codeOf = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{nodeapi.ErrNotServing, codes.FailedPrecondition, "NODE_NOT_SERVING"},
	{nodeapi.ErrFenced, codes.Aborted, "FENCED"},
	{nodeapi.ErrExecStart, codes.FailedPrecondition, "EXEC_START_FAILED"},
	{nodeapi.ErrExecEnded, codes.FailedPrecondition, "EXEC_ENDED"},
	{nodeapi.ErrNoFile, codes.NotFound, "NO_SUCH_FILE"},
	{nodeapi.ErrTooLarge, codes.InvalidArgument, "TOO_LARGE"},
	{snapshot.ErrTreeChanged, codes.Aborted, "TREE_CHANGED"},
	{nodeapi.ErrUnknownWorker, codes.NotFound, ""},
	{nodeapi.ErrStale, codes.FailedPrecondition, ""},
	{snapshot.ErrCorrupt, codes.DataLoss, ""},
	{snapshot.ErrNotFound, codes.OutOfRange, ""},
	{nodeapi.ErrStartFailed, codes.Aborted, ""},
	{nodeapi.ErrBadPath, codes.InvalidArgument, ""},
	{nodeapi.ErrExecUnsupported, codes.Unimplemented, ""},
}

func toStatus(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range codeOf {
		if !errors.Is(err, c.err) {
			continue
		}
		st := status.New(c.code, err.Error())
		if c.reason != "" {
			if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: c.reason, Domain: atev1.ErrorDomain}); derr == nil {
				st = d
			}
		}
		return st.Err()
	}
	return status.Error(codes.Internal, err.Error())
}

// fromStatus returns err as the node error its code stands for, keeping
// the node's message; transport failures wrap ErrUnreachable.
func fromStatus(node string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	reason := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
		}
	}
	for _, c := range codeOf {
		if st.Code() == c.code && reason == c.reason {
			return &remoteError{sentinel: c.err, msg: st.Message()}
		}
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return fmt.Errorf("%w: node %s: %s", ErrUnreachable, node, st.Message())
	}
	return errors.New(st.Message())
}

// ErrUnreachable: the node agent did not answer (nodeapi.ErrUnreachable).
var ErrUnreachable = nodeapi.ErrUnreachable

// remoteError is a node error that crossed the wire: its message is the
// node's, and it matches the sentinel the code stands for.
type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string        { return e.msg }
func (e *remoteError) Is(target error) bool { return target == e.sentinel }
