package nodeapi

import (
	"context"

	"substrate.dev/ate/internal/store"
)

// ErrFenced: the node refused a start, checkpoint or stop of an actor
// because a call for that actor already carried a newer lease token: the
// asking workflow stood still past its lease (SIGSTOP, a long pause, a
// partition) and another one has acted on the actor since. It is the
// store's sentinel, for it means what a fenced write means: the workflow
// must stop, not retry.
var ErrFenced = store.ErrFenced

type fenceKey struct{}

// WithFence returns ctx carrying token, the lease token of the actor a
// node call is about (store.Lease.Token). Set it only for a call about
// the very actor whose lease the workflow holds: the node keeps the
// newest token per actor and refuses older ones (ErrFenced).
func WithFence(ctx context.Context, token int64) context.Context {
	return context.WithValue(ctx, fenceKey{}, token)
}

// FenceFrom returns the token ctx carries (WithFence), 0 if none: a
// caller that holds no lease (one API server alone over its embedded
// store), or a call no workflow makes (stop orders).
func FenceFrom(ctx context.Context) int64 {
	t, _ := ctx.Value(fenceKey{}).(int64)
	return t
}
