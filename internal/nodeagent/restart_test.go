package nodeagent

import (
	"context"
	"log/slog"
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
		// lateCheck: the predecessor had been silent for most of the
		// loss deadline, and a replica's loss check that ran late (it
		// stood still) restarts its silence once the new incarnation
		// has been refused: the wait it was told of grows.
		lateCheck bool
		want      codes.Code
	}{
		{"the predecessor died with its stream open: welcomed once it is declared lost", false, false, codes.OK},
		{"the predecessor died, and a late loss check restarted its silence: welcomed", false, true, codes.OK},
		{"the predecessor is alive and heartbeating: refused", true, false, codes.AlreadyExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			dir := t.TempDir()
			st, err := bolt.Open(filepath.Join(dir, "ate.db"), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			n := newFakeNode(t, ctx, dir)
			heartbeat, lostAfter := 50*time.Millisecond, 500*time.Millisecond
			if tc.lateCheck {
				// Long enough that one restart of the silence outlasts
				// the first wait the node is told of (a second left:
				// 2×1 s + 1 s < 4 s), with a heartbeat slow enough that
				// a busy machine's stall is not a second late check.
				heartbeat, lostAfter = 200*time.Millisecond, 4*time.Second
			}
			reg, err := NewRegistry(ctx, RegistryConfig{Store: st, Heartbeat: heartbeat, LostAfter: lostAfter})
			if err != nil {
				t.Fatal(err)
			}
			reg.SetWorkflows(&lostRecorder{st: st})
			p := NewInProcess()
			waiting := make(chan struct{}, 1)
			agent := NewAgent(AgentConfig{Node: n, Replicas: p.Replicas, Dial: p.DialRegistry, Address: InProcessAddress, TunnelAddr: "127.0.0.1:1",
				Logger: slog.New(signalOn{msg: waitingMsg, ch: waiting})})

			// The predecessor: the same node and workers under another
			// epoch, welcomed, its stream never ended.
			h := agent.hello()
			h.Epoch--
			prev, _, err := reg.admit(ctx, h, func() {})
			if err != nil {
				t.Fatal(err)
			}

			if tc.lateCheck {
				reg.mu.Lock()
				prev.lastHeard = time.Now().Add(-lostAfter + time.Second)
				reg.mu.Unlock()
			}

			first := make(chan error, 1)
			serveAll(t, ctx, cancel, p, reg, agent, st, first)
			if tc.lateCheck {
				select {
				case <-waiting:
				case <-time.After(10 * time.Second):
					t.Fatal("the restarted node was not refused within 10 s")
				}
				// What Registry.Run does after a late check.
				reg.mu.Lock()
				prev.lastHeard = time.Now()
				reg.mu.Unlock()
			}
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

// waitingMsg is what the agent logs when a refusal names a wait it
// waits out.
const waitingMsg = "this node's name is still registered by another incarnation; waiting for it to fall silent"

// signalOn is a log handler that signals ch (without blocking) at each
// record whose message is msg, and discards everything.
type signalOn struct {
	msg string
	ch  chan<- struct{}
}

func (h signalOn) Enabled(context.Context, slog.Level) bool { return true }
func (h signalOn) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h signalOn) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalOn) WithGroup(string) slog.Handler      { return h }
