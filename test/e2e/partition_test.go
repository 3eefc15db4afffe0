package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// linkProxy stands in for the network between two components: it
// forwards TCP connections to target, and while cut nothing crosses it
// in either direction — bytes wait, as on a link that drops packets
// while the peers keep retransmitting — and new connections are
// accepted but get nowhere. Cut one way, only the bytes going that way
// wait: up is from the dialling side to target, down the reverse.
type linkProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	cutUp   bool
	cutDown bool
	closed  bool
	conns   []net.Conn
	wg      sync.WaitGroup
}

func startLinkProxy(t testing.TB, target string) *linkProxy {
	t.Helper()
	return startLinkProxyOn(t, "127.0.0.1:0", target)
}

// startLinkProxyOn is startLinkProxy listening on addr.
func startLinkProxyOn(t testing.TB, addr, target string) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

func (p *linkProxy) addr() string { return p.ln.Addr().String() }

// setCut cuts the link both ways, or heals it.
func (p *linkProxy) setCut(cut bool) { p.setCutWays(cut, cut) }

// setCutWays cuts the link in the directions given and heals the others.
func (p *linkProxy) setCutWays(up, down bool) {
	p.mu.Lock()
	p.cutUp, p.cutDown = up, down
	p.mu.Unlock()
	p.cond.Broadcast()
}

// open waits while the link is cut in direction up (or down); false
// once the proxy closed.
func (p *linkProxy) open(up bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for (up && p.cutUp || !up && p.cutDown) && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}

func (p *linkProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *linkProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			return
		}
		p.wg.Go(func() {
			// A connection is made only when both ways are open: the
			// handshake needs both.
			if !p.open(true) || !p.open(false) {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil || !p.track(out) {
				_ = in.Close()
				return
			}
			var both sync.WaitGroup
			both.Go(func() { p.pipe(out, in, true) })
			both.Go(func() { p.pipe(in, out, false) })
			both.Wait()
			_ = in.Close()
			_ = out.Close()
		})
	}
}

// pipe copies src to dst, holding what it read while the link is cut
// in direction up (or down).
func (p *linkProxy) pipe(dst, src net.Conn, up bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.open(up) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(err, io.EOF) {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}

func (p *linkProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.mu.Unlock()
	p.cond.Broadcast()
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

// TestHANodeCutOffFromOneReplica: a partial partition. The node's link
// to one API server replica (0) is cut, well past the loss deadline,
// while it still talks to the other (1), under a client's steady
// requests to a counter actor. Replica 0 hears nothing from the node but
// never declares it lost on its own (the other replica renews the node's
// lease); no request fails, and every count is one more than the last:
// the actor was neither restored from a snapshot (rolled back) nor run
// twice. After the link heals the same holds.
func TestHANodeCutOffFromOneReplica(t *testing.T) {
	var link *linkProxy
	h := startHAVia(t, 1, func(addrs [2]string) string {
		link = startLinkProxy(t, addrs[0])
		return link.addr() + "," + addrs[1]
	})
	h.counterActor() // count=1
	next := 2
	request := func(when string) {
		t.Helper()
		code, body, _, err := h.in.request(http.MethodGet, "default/counter-1", "/", "")
		if want := fmt.Sprintf("count=%d", next); err != nil || code != http.StatusOK || strings.TrimSpace(body) != want {
			t.Fatalf("%s: request %d answered %d %q (%v), want 200 %s", when, next-1, code, strings.TrimSpace(body), err, want)
		}
		next++
	}
	request("before the cut")
	link.setCut(true)
	// Until replica 0 has not heard the node for three loss deadlines
	// (2 s each), or declared it lost.
	const silence = 3 * 2 * time.Second
	nodeOn := func(i int) *atev1.Node {
		t.Helper()
		nodes, err := h.replica[i].ListNodes(context.Background(), &atev1.ListNodesRequest{})
		if err != nil || len(nodes.GetNodes()) != 1 {
			t.Fatalf("nodes on replica %d: %v (%v)", i, nodes.GetNodes(), err)
		}
		return nodes.GetNodes()[0]
	}
	for {
		n := nodeOn(0)
		if n.GetPhase() == atev1.Node_LOST || time.Since(n.GetLastHeartbeat().AsTime()) > silence {
			break
		}
		request("while the node was cut off from replica 0")
	}
	for i := range h.replica {
		if n := nodeOn(i); n.GetPhase() == atev1.Node_LOST {
			t.Fatalf("replica %d declared %s lost (%s) while replica 1 heard it", i, n.GetName(), n.GetMessage())
		}
	}
	// It did look, and found the node's lease held.
	refusals := h.apis[0].records("node silent here, but its lease is held: not declaring it lost")
	if refusals == 0 {
		t.Fatal("replica 0 never checked the silent node's lease")
	}
	request("at the end of the cut")
	link.setCut(false)
	for range 10 {
		request("after the link healed")
	}
	for i, api := range h.apis {
		if n := api.records("node lost"); n != 0 {
			t.Fatalf("replica %d logged %d node losses", i, n)
		}
	}
	if a := h.in.actor("counter-1"); a.GetState() != atev1.ActorState_RUNNING {
		t.Fatalf("actor %s (%s) after the partition, want RUNNING", a.GetState(), a.GetMessage())
	}
	t.Logf("%d requests served in order; replica 0 found the silent node's lease held %d times", next-2, refusals)
}

// TestHANodeOneWayPartition: the node running an actor loses one
// direction of its links to both API server replicas, while routers
// still reach it, under a client's steady requests.
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
		name     string
		up, down bool
	}{
		{"node to replicas dropped", true, false},
		{"replicas to node dropped", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var links [2]*linkProxy
			h := startHAVia(t, 1, func(addrs [2]string) string {
				links[0], links[1] = startLinkProxy(t, addrs[0]), startLinkProxy(t, addrs[1])
				return links[0].addr() + "," + links[1].addr()
			})
			h.counterActor() // on node-a, the only node; count=1
			h.startNode("node-b", h.addrs[0]+","+h.addrs[1], "--workers", "1")
			var counts []int
			request := func(when string) {
				t.Helper()
				start := time.Now()
				n, err := h.in.count("default/counter-1")
				if err != nil {
					t.Fatalf("%s: request %d after %s: %v", when, len(counts)+1, time.Since(start), err)
				}
				counts = append(counts, n)
			}
			request("before the cut")
			for _, l := range links {
				l.setCutWays(c.up, c.down)
			}
			cut := time.Now()
			for h.nodeOf("counter-1") != "node-b" {
				request("during the partition")
				if time.Since(cut) > 60*time.Second {
					t.Fatalf("the actor was not moved off node-a within 60 s of the partition; counts %v", counts)
				}
			}
			moved := time.Since(cut)
			for range 5 {
				request("after the move")
			}
			for _, l := range links {
				l.setCut(false)
			}
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
			for _, api := range h.apis {
				lost += api.records("node lost")
			}
			if lost == 0 {
				t.Fatal("no replica logged node-a's loss")
			}
			restart := len(counts)
			for i := 1; i < len(counts); i++ {
				if counts[i] != counts[i-1]+1 {
					restart = i
				}
			}
			t.Logf("%d requests, all answered; the actor was on node-b %s after the cut; counts %d..%d on node-a, then %v", len(counts),
				moved.Round(time.Millisecond), counts[0], counts[restart-1], counts[restart:])
		})
	}
}
