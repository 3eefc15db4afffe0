package node

import (
	"context"
	"fmt"

	"substrate.dev/ate/internal/nodeapi"
)

// fenceTokens keeps, per actor uid, the newest lease token a start,
// checkpoint or stop of that actor carried (nodeapi.WithFence), and
// refuses a call whose token is older.
//
// Why: a workflow checks its lease (a renewal) before it asks a node to
// stop or checkpoint a sandbox, but the node cannot check the store. A
// replica that stands still between that check and its call (SIGSTOP, a
// long pause, a call held in a partition) may be taken over: the new
// holder restores the actor, perhaps on this very worker, and the late
// call would then stop or checkpoint the new holder's sandbox, losing
// what the actor answered since. Lease tokens grow store-wide, so the
// new holder's calls carry a larger one and, once one of them has
// reached the node, every late call of the old holder is refused here
// (ErrFenced). A new holder always calls the node before it lets the
// actor serve again (it settles the old workflow's state there, or
// restores), so the late call meets that token.
//
// Tokens must only grow. Over PostgreSQL a lease's acquisition commits
// without waiting for its flush, so a database crash could hand its
// token out again; every workflow makes a durable write (its -ING write,
// a renewal) before its first node call, whose flush covers the
// acquisition's (docs/ha.md, Node calls are fenced).
//
// A call with no token (0: one API server alone, which holds no leases;
// the registry's stop orders) is not checked and records nothing. Kept
// for the fenceTokensKept actors seen last, in the order first seen: a
// late call arrives within a lease or so of its workflow, long before a
// node has seen that many other actors.
type fenceTokens struct{ newest firstSeen[int64] }

const fenceTokensKept = 1 << 16

// admit records token for actorUID and returns nil, or ErrFenced if a
// call for actorUID carried a newer one. Equal tokens are one workflow's
// calls (a start and, later, its stop) and pass.
func (f *fenceTokens) admit(actorUID string, token int64) error {
	if token == 0 {
		return nil
	}
	return f.newest.update(actorUID, fenceTokensKept, func(seen int64, ok bool) (int64, error) {
		if ok && token < seen {
			return 0, fmt.Errorf("%w: actor %s was acted on under lease token %d since this call's workflow took token %d",
				ErrFenced, actorUID, seen, token)
		}
		return token, nil
	})
}

// FenceActor implements nodeapi.Node.
func (n *Node) FenceActor(ctx context.Context, actorUID string) error {
	return n.admitFence(ctx, "", actorUID)
}

// admitFence is admit with the token ctx carries (nodeapi.FenceFrom). The
// caller holds the worker's operation lock, so the check and the
// operation are one step for that worker.
func (n *Node) admitFence(ctx context.Context, worker, actorUID string) error {
	if err := n.fences.admit(actorUID, nodeapi.FenceFrom(ctx)); err != nil {
		n.log.WarnContext(ctx, "node call refused: its workflow's lease was taken over", "worker", worker, "actor_uid", actorUID, "err", err)
		return err
	}
	return nil
}
