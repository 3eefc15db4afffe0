package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/store"
)

// A node's liveness is a lease in the record store, one per incarnation
// (node name and epoch), so that every API server replica agrees on it
// whichever of them hears the node, and no two clocks need to agree: the
// store alone computes and compares its expiry.
//
//   - A replica takes the lease when it welcomes the node (takeLease) and
//     renews it on the node's heartbeats (renew), answering each renewal,
//     so the node knows from when its lease runs.
//   - A replica declares a node lost only by taking its lease, under its
//     own holder name (declareIfLapsed), which the store allows only once
//     the incarnation's lease has expired; it holds that lease while it
//     crashes the node's actors, so the node cannot be welcomed meanwhile.
//   - The node serves only until the moment its lease surely holds, by
//     its own monotonic clock from when it sent the hello or heartbeat the
//     store renewed it on (Agent.leaseHeld, node.SetLease): it stops before
//     any replica can declare it lost.
//
// docs/ha.md gives the argument.

// nodeLeaseKey is the store lease of node's liveness.
func nodeLeaseKey(node string) string { return "node/" + node }

// leaseHolder is the holder of an incarnation's lease. With
// RegistryConfig.OneProcess every incarnation holds it under one name:
// the last one is dead once this process runs.
func (r *Registry) leaseHolder(node string, epoch int64) string {
	if r.cfg.OneProcess {
		return node
	}
	return fmt.Sprintf("%s@%d", node, epoch)
}

// Declaring a node lost holds its lease for declareTTL, renewed every
// declareRenew. It must outlast an actor's lease (lifecycle's, 10 s by
// default) after a renewal: a declarer that stood still mid-way and wakes
// after its hold ran out has its remaining writes fenced by their
// actors' leases, before the node can be welcomed again.
const (
	declareTTL   = 30 * time.Second
	declareRenew = 5 * time.Second
)

// takeLease takes or renews the lease of h's incarnation as it
// registers. The token the node holds renews it (kept: held without a
// break since an earlier welcome); otherwise it is taken anew, which the
// store refuses while another incarnation holds it or a replica is
// declaring the node lost (UNAVAILABLE: the node retries).
func (r *Registry) takeLease(ctx context.Context, h *atev1.NodeHello) (token int64, kept bool, err error) {
	key, holder := nodeLeaseKey(h.GetNode()), r.leaseHolder(h.GetNode(), h.GetEpoch())
	if t := h.GetLeaseToken(); t != 0 {
		_, err := r.cfg.Store.RenewLease(ctx, key, holder, t, r.cfg.LostAfter)
		if err == nil {
			return t, true, nil
		}
		if !errors.Is(err, store.ErrFenced) {
			return 0, false, status.Errorf(codes.Unavailable, "register node %s: renew its lease: %v", h.GetNode(), err)
		}
	}
	l, err := r.cfg.Store.AcquireLease(ctx, key, holder, r.cfg.LostAfter)
	if errors.Is(err, store.ErrLeaseHeld) {
		return 0, false, status.Errorf(codes.Unavailable,
			"node %s: its lease is held by an earlier incarnation of it, or by an API server declaring it lost, until that runs out or ends (%v); retrying", h.GetNode(), err)
	}
	if err != nil {
		return 0, false, status.Errorf(codes.Unavailable, "register node %s: take its lease: %v", h.GetNode(), err)
	}
	// Taking a lease does not wait for the store's disk (PostgreSQL);
	// renewing does. The node serves on this lease: make it durable.
	if _, err := r.cfg.Store.RenewLease(ctx, key, holder, l.Token, r.cfg.LostAfter); err != nil {
		return 0, false, status.Errorf(codes.Unavailable, "register node %s: renew its lease: %v", h.GetNode(), err)
	}
	return l.Token, false, nil
}

// renew renews m's lease on heartbeat hb, at most every quarter of the
// loss deadline, and tells the node (LeaseRenewed) by send. A lease the
// store says lapsed or was taken ends the session (FAILED_PRECONDITION):
// the node, which stopped serving on its own by then, registers again
// and is reconciled. A node that numbers no heartbeats keeps no lease
// (an older node); one that says its lease lapsed is not renewed.
func (r *Registry) renew(ctx context.Context, m *member, hb *atev1.NodeHeartbeat, send func(*atev1.RegistryMessage) error) error {
	// A node whose lease ran out by its own count serves nothing; it
	// must not be kept holding its actors (NodeHeartbeat.lease_lapsed).
	if hb.GetSeq() == 0 || hb.GetLeaseLapsed() {
		return nil
	}
	r.mu.Lock()
	due := time.Since(m.renewed) >= r.cfg.LostAfter/4
	r.mu.Unlock()
	if !due {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, r.cfg.Heartbeat)
	defer cancel()
	_, err := r.cfg.Store.RenewLease(rctx, nodeLeaseKey(m.name), r.leaseHolder(m.name, m.epoch), hb.GetLeaseToken(), r.cfg.LostAfter)
	switch {
	case errors.Is(err, store.ErrFenced):
		return status.Errorf(codes.FailedPrecondition, "node %s: its lease lapsed or was taken over; register again", m.name)
	case err != nil:
		// The store is out of reach: the node's lease runs on, and out,
		// unless another replica renews it.
		r.log.WarnContext(ctx, "renew node lease", "node", m.name, "err", err)
		return nil
	}
	r.mu.Lock()
	m.renewed = time.Now()
	r.mu.Unlock()
	return send(&atev1.RegistryMessage{Msg: &atev1.RegistryMessage_LeaseRenewed{LeaseRenewed: &atev1.LeaseRenewed{Seq: hb.GetSeq()}}})
}

// declareIfLapsed declares node lost, for why, if its lease has expired
// in the store: this replica then holds the lease while it does. A lease
// still held means another replica hears the node (or is declaring it
// lost): this replica's silence is its own, and it declares nothing.
func (r *Registry) declareIfLapsed(ctx context.Context, node, why string) {
	key := nodeLeaseKey(node)
	l, err := r.cfg.Store.AcquireLease(ctx, key, r.declarer, declareTTL)
	if errors.Is(err, store.ErrLeaseHeld) {
		r.log.DebugContext(ctx, "node silent here, but its lease is held: not declaring it lost", "node", node, "err", err)
		return
	}
	if err != nil {
		r.log.WarnContext(ctx, "take a silent node's lease", "node", node, "err", err)
		return
	}
	hold, stop := context.WithCancel(context.WithoutCancel(ctx))
	var held sync.WaitGroup
	held.Go(func() {
		warn := func(err error) {
			r.log.WarnContext(ctx, "renew the lease of a node being declared lost", "node", node, "err", err)
		}
		if err := store.KeepRenewed(hold, r.cfg.Store, store.Fence{Key: key, Holder: r.declarer, Token: l.Token}, declareTTL, declareRenew, 0, warn); err != nil {
			warn(err)
		}
	})
	r.declareLost(ctx, node, 0, why)
	stop()
	held.Wait()
	if err := r.cfg.Store.ReleaseLease(context.WithoutCancel(ctx), key, r.declarer); err != nil {
		r.log.WarnContext(ctx, "release the lease of a node declared lost", "node", node, "err", err)
	}
}
