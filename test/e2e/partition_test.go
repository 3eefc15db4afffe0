package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestHANodeCutOffFromOneReplica: a partial partition. The packets
// between the node running a counter actor and one API server replica
// (0) are dropped both ways, well past the loss deadline, while the node
// still talks to the other (1), under a client's steady requests to the
// actor. Replica 0 hears nothing from the node but
// never declares it lost on its own (the other replica renews the node's
// lease); no request fails, and every count is one more than the last:
// the actor was neither restored from a snapshot (rolled back) nor run
// twice. After the link heals the same holds.
func TestHANodeCutOffFromOneReplica(t *testing.T) {
	r := startChaos(t)
	const actor = "chaos-0"
	next := 1
	request := func(when string) {
		t.Helper()
		code, body, _, err := r.in.request(http.MethodGet, "default/"+actor, "/", "")
		if want := fmt.Sprintf("count=%d", next); err != nil || code != http.StatusOK || strings.TrimSpace(body) != want {
			t.Fatalf("%s: request %d answered %d %q (%v), want 200 %s", when, next-1, code, strings.TrimSpace(body), err, want)
		}
		next++
	}
	request("before the cut")
	on := r.nodeOf(actor)
	r.net.cut("cut", r.hosts[on], r.replicaHost(0))
	// Until replica 0 has not heard the node for three loss deadlines
	// (2 s each), or declared it lost.
	const silence = 3 * 2 * time.Second
	nodeOn := func(i int) *atev1.Node {
		t.Helper()
		nodes, err := r.replica[i].ListNodes(context.Background(), &atev1.ListNodesRequest{})
		if err != nil {
			t.Fatalf("nodes on replica %d: %v", i, err)
		}
		for _, n := range nodes.GetNodes() {
			if n.GetName() == on {
				return n
			}
		}
		t.Fatalf("replica %d lists no %s: %v", i, on, nodes.GetNodes())
		return nil
	}
	for {
		n := nodeOn(0)
		if n.GetPhase() == atev1.Node_LOST || time.Since(n.GetLastHeartbeat().AsTime()) > silence {
			break
		}
		request("while the node was cut off from replica 0")
	}
	for i := range r.replica {
		if n := nodeOn(i); n.GetPhase() == atev1.Node_LOST {
			t.Fatalf("replica %d declared %s lost (%s) while replica 1 heard it", i, n.GetName(), n.GetMessage())
		}
	}
	// It did look, and found the node's lease held.
	refusals := r.apis[0].records("node silent here, but its lease is held: not declaring it lost")
	if refusals == 0 {
		t.Fatal("replica 0 never checked the silent node's lease")
	}
	request("at the end of the cut")
	r.net.heal("cut")
	for range 10 {
		request("after the link healed")
	}
	for i, api := range r.apis {
		if n := api.records("node lost"); n != 0 {
			t.Fatalf("replica %d logged %d node losses", i, n)
		}
	}
	if a := r.in.actor(actor); a.GetState() != atev1.ActorState_RUNNING {
		t.Fatalf("actor %s (%s) after the partition, want RUNNING", a.GetState(), a.GetMessage())
	}
	t.Logf("%d requests served in order; replica 0 found the silent %s's lease held %d times", next-1, on, refusals)
}

// TestHANodeOneWayPartition: the packets going one way between the node
// running an actor and both API server replicas are dropped, while the
// router still reaches it, under a client's steady requests.
//
//   - node to replicas dropped: the replicas hear nothing and the node
//     no renewals;
//   - replicas to node dropped: the replicas hear its heartbeats (and
//     could renew its lease forever) but the node hears no renewal.
//
// Either way the node stops serving by its own count of its lease, its
// lease lapses in the store, a replica declares it lost and the actor
// is restored on the other node. No request fails (they park while the
// node serves nothing), and the counts show one actor: they rise by one
// per request, restart once from the snapshot on the other node, and
// the old copy never answers again.
func TestHANodeOneWayPartition(t *testing.T) {
	for _, c := range []struct {
		name string
		// toReplicas: the node's packets to the replicas are dropped;
		// else theirs to the node.
		toReplicas bool
	}{
		{"node to replicas dropped", true},
		{"replicas to node dropped", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := startChaos(t)
			const actor = "chaos-0"
			var counts []int
			request := func(when string) {
				t.Helper()
				start := time.Now()
				n, err := r.in.count("default/" + actor)
				if err != nil {
					t.Fatalf("%s: request %d after %s: %v", when, len(counts)+1, time.Since(start), err)
				}
				counts = append(counts, n)
			}
			request("before the cut")
			on := r.nodeOf(actor)
			for i := range 2 {
				if c.toReplicas {
					r.net.drop("cut", r.replicaHost(i), r.hosts[on], false, 0)
				} else {
					r.net.drop("cut", r.hosts[on], r.replicaHost(i), false, 0)
				}
			}
			cut := time.Now()
			for n := r.nodeOf(actor); n == on || n == ""; n = r.nodeOf(actor) {
				request("during the partition")
				if time.Since(cut) > 60*time.Second {
					t.Fatalf("the actor was not moved off %s within 60 s of the partition; counts %v", on, counts)
				}
			}
			moved := time.Since(cut)
			for range 5 {
				request("after the move")
			}
			r.net.heal("cut")
			for range 5 {
				request("after the link healed")
			}
			resets := 0
			for i := 1; i < len(counts); i++ {
				if counts[i] != counts[i-1]+1 {
					resets++
				}
			}
			if resets > 1 {
				t.Fatalf("counts %v: two copies of the actor answered, or acknowledged counts went back more than once", counts)
			}
			lost := 0
			for _, api := range r.apis {
				lost += api.records("node lost")
			}
			if lost == 0 {
				t.Fatalf("no replica logged %s's loss", on)
			}
			restart := len(counts)
			for i := 1; i < len(counts); i++ {
				if counts[i] != counts[i-1]+1 {
					restart = i
				}
			}
			t.Logf("%d requests, all answered; the actor was off %s %s after the cut; counts %d..%d there, then %v", len(counts), on,
				moved.Round(time.Millisecond), counts[0], counts[restart-1], counts[restart:])
		})
	}
}
