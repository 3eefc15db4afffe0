package nodeapi

import (
	"context"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// BuildPhase is a phase of a golden build: the API's enum itself, so a
// phase crosses the node protocol and lands in a template's status
// without conversions; its Text is the phase's human text ("pulling and
// unpacking the image", …).
type BuildPhase = atev1.BuildPhase

// Golden build phases, in order, as reported to a ProgressFunc.
const (
	PhaseImage      = atev1.BuildPhase_IMAGE
	PhaseBoot       = atev1.BuildPhase_BOOT
	PhaseProbe      = atev1.BuildPhase_PROBE
	PhaseCheckpoint = atev1.BuildPhase_CHECKPOINT
)

// ProgressFunc is told each phase of a long operation as it begins (a
// golden build: PhaseImage, PhaseBoot, PhaseProbe, PhaseCheckpoint). It
// runs on the operation's goroutine and should return quickly.
type ProgressFunc func(phase BuildPhase)

type progressKey struct{}

// WithProgress returns ctx carrying f, a request-scoped listener for the
// phases of the node operation ctx is passed to.
func WithProgress(ctx context.Context, f ProgressFunc) context.Context {
	return context.WithValue(ctx, progressKey{}, f)
}

// Progress tells ctx's ProgressFunc, if any, that phase begins: called
// by the node as it builds, and by a caller relaying a remote node's
// phases (nodeagent.Remote).
func Progress(ctx context.Context, phase BuildPhase) {
	if f, ok := ctx.Value(progressKey{}).(ProgressFunc); ok && f != nil {
		f(phase)
	}
}
