package nodeapi

import "context"

// Golden build phases, in order, as reported to a ProgressFunc.
const (
	PhaseImage      = "pulling and unpacking the image"
	PhaseBoot       = "booting the sandbox"
	PhaseProbe      = "waiting for the wakeup probe"
	PhaseCheckpoint = "checkpointing the golden snapshot"
)

// ProgressFunc is told each phase of a long operation as it begins (a
// golden build: PhaseImage, PhaseBoot, PhaseProbe, PhaseCheckpoint). It
// runs on the operation's goroutine and should return quickly.
type ProgressFunc func(phase string)

type progressKey struct{}

// WithProgress returns ctx carrying f, a request-scoped listener for the
// phases of the node operation ctx is passed to.
func WithProgress(ctx context.Context, f ProgressFunc) context.Context {
	return context.WithValue(ctx, progressKey{}, f)
}

// Progress tells ctx's ProgressFunc, if any, that phase begins: called
// by the node as it builds, and by a caller relaying a remote node's
// phases (nodeagent.Remote).
func Progress(ctx context.Context, phase string) {
	if f, ok := ctx.Value(progressKey{}).(ProgressFunc); ok && f != nil {
		f(phase)
	}
}
