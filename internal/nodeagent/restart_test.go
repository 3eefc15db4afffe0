package nodeagent

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"substrate.dev/ate/internal/store/bolt"
)

// TestRestartWaitsOutItsPredecessor: a node restarts while its
// predecessor's registration is still open on the API server (the
// process died, its connection did not: a proxy or a half-open TCP
// connection keeps the stream). The new incarnation is refused the name
// only until the predecessor has been silent long enough to be declared
// lost, and then welcomed: its start does not fail. A predecessor that
// goes on heartbeating — a second live process under the name — keeps
// it, and the new one's start fails with AlreadyExists.
func TestRestartWaitsOutItsPredecessor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alive bool
		want  codes.Code
	}{
		{"the predecessor died with its stream open: welcomed once it is declared lost", false, codes.OK},
		{"the predecessor is alive and heartbeating: refused", true, codes.AlreadyExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			dir := t.TempDir()
			st, err := bolt.Open(filepath.Join(dir, "ate.db"), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			n := newFakeNode(t, ctx, dir)
			reg, err := NewRegistry(ctx, RegistryConfig{Store: st, Heartbeat: 50 * time.Millisecond, LostAfter: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			reg.SetWorkflows(&lostRecorder{st: st})
			p := NewInProcess()
			agent := NewAgent(AgentConfig{Node: n, Replicas: p.Replicas, Dial: p.DialRegistry, Address: InProcessAddress, TunnelAddr: "127.0.0.1:1"})

			// The predecessor: the same node and workers under another
			// epoch, welcomed, its stream never ended.
			h := agent.hello()
			h.Epoch--
			prev, _, err := reg.admit(ctx, h, func() {})
			if err != nil {
				t.Fatal(err)
			}

			first := make(chan error, 1)
			serveAll(t, ctx, cancel, p, reg, agent, st, first)
			if tc.alive {
				// Its heartbeats, as the registry records them.
				var beating sync.WaitGroup
				t.Cleanup(func() { cancel(); beating.Wait() }) // before serveAll's
				beating.Go(func() {
					tick := time.NewTicker(50 * time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-ctx.Done():
							return
						case <-tick.C:
						}
						reg.mu.Lock()
						prev.lastHeard = time.Now()
						reg.mu.Unlock()
					}
				})
			}
			select {
			case err := <-first:
				if status.Code(err) != tc.want {
					t.Fatalf("the restarted node's first registration = %v, want %v", err, tc.want)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no outcome of the restarted node's first registration within 30 s")
			}
		})
	}
}
