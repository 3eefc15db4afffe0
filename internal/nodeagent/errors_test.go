package nodeagent

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

// TestErrorsCrossTheWire: a node error sent as its gRPC code comes back
// as the same sentinel with the node's message; a transport failure is
// ErrUnreachable.
func TestErrorsCrossTheWire(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("%w: w9", nodeapi.ErrUnknownWorker), nodeapi.ErrUnknownWorker},
		{fmt.Errorf("worker w1: %w", nodeapi.ErrStale), nodeapi.ErrStale},
		{fmt.Errorf("%w: object a/b/pages.img.zst: sha256 1234 != 5678", snapshot.ErrCorrupt), snapshot.ErrCorrupt},
		{fmt.Errorf("%w: a/b", snapshot.ErrNotFound), snapshot.ErrNotFound},
		{fmt.Errorf("%w: image x", nodeapi.ErrStartFailed), nodeapi.ErrStartFailed},
		// Shares FAILED_PRECONDITION with ErrStale: told apart by its reason.
		{fmt.Errorf("%w: node n1 cannot start actor a", nodeapi.ErrNotServing), nodeapi.ErrNotServing},
		{fmt.Errorf("copy volume data: copy /v: v01: %w", snapshot.ErrTreeChanged), snapshot.ErrTreeChanged},
		// Shares ABORTED with ErrStartFailed: told apart by its reason.
		{fmt.Errorf("%w: actor a was acted on under lease token 9 since this call's workflow took token 7", nodeapi.ErrFenced), store.ErrFenced},
	} {
		got := fromStatus("n1", toStatus(tc.err))
		if !errors.Is(got, tc.want) || got.Error() != tc.err.Error() {
			t.Errorf("%v crossed as %v (is %v: %v)", tc.err, got, tc.want, errors.Is(got, tc.want))
		}
	}
	if got := fromStatus("n1", status.Error(codes.Unavailable, "connection refused")); !errors.Is(got, ErrUnreachable) {
		t.Errorf("Unavailable crossed as %v, want ErrUnreachable", got)
	}
	if fromStatus("n1", toStatus(nil)) != nil {
		t.Error("nil did not cross as nil")
	}
}

// TestFenceActorNeedsAToken: FenceActor without an actor or a token is
// refused as INVALID_ARGUMENT before it reaches the node (a zero token
// would record nothing and fence nothing, silently).
func TestFenceActorNeedsAToken(t *testing.T) {
	s := &Server{} // no node: a refused call must not reach one
	for _, r := range []*atev1.FenceActorRequest{{ActorUid: "a"}, {Fence: 7}} {
		if _, err := s.FenceActor(t.Context(), r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("FenceActor(%v) = %v, want INVALID_ARGUMENT", r, err)
		}
	}
}
