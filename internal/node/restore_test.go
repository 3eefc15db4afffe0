package node

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/snapshot"
)

// hookPort is where noticeRuntime serves the onRestore hook.
const hookPort = 9000

// noticeRuntime is the fake runtime that, as a sandbox does, sees the
// identity directory through the spec's mounts: it records what
// /run/ate/generation and /run/ate/random held when each Run or Restore
// began, and serves hookPort with hook (the fake's containers answer only
// GET / and /healthz).
type noticeRuntime struct {
	*fake.Runtime
	srv *httptest.Server

	mu   sync.Mutex
	hook http.Handler
	seen []seenStart
}

type seenStart struct {
	op                 string // "run" or "restore"
	generation, random string
}

func newNoticeRuntime(t *testing.T) *noticeRuntime {
	r := &noticeRuntime{Runtime: fake.New(fake.Config{})}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		hook := r.hook
		r.mu.Unlock()
		if hook == nil {
			http.NotFound(w, req)
			return
		}
		hook.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *noticeRuntime) setHook(h http.Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hook = h
}

func (r *noticeRuntime) record(op string, spec sandbox.Spec) {
	var dir string
	for _, m := range spec.Mounts {
		if m.Destination == IdentityDir {
			dir = m.Source
		}
	}
	gen, _ := os.ReadFile(filepath.Join(dir, "generation"))
	rnd, _ := os.ReadFile(filepath.Join(dir, "random"))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, seenStart{op: op, generation: string(gen), random: string(rnd)})
}

func (r *noticeRuntime) starts() []seenStart {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seenStart(nil), r.seen...)
}

func (r *noticeRuntime) Run(ctx context.Context, slot sandbox.Slot, spec sandbox.Spec) error {
	r.record("run", spec)
	return r.Runtime.Run(ctx, slot, spec)
}

func (r *noticeRuntime) Restore(ctx context.Context, slot sandbox.Slot, spec sandbox.Spec, imageDir string) error {
	r.record("restore", spec)
	return r.Runtime.Restore(ctx, slot, spec, imageDir)
}

func (r *noticeRuntime) DialContext(ctx context.Context, slot sandbox.Slot, port int) (net.Conn, error) {
	if port == hookPort {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", r.srv.Listener.Addr().String())
	}
	return r.Runtime.DialContext(ctx, slot, port)
}

// withHook is template("img1") with an onRestore hook on hookPort.
func withHook(timeoutSeconds int32) *atev1.ActorTemplateSpec {
	spec := template("img1")
	spec.OnRestore = &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Path: "/ate/restored", Port: hookPort}, TimeoutSeconds: timeoutSeconds}
	return spec
}

// startAndCheckpoint starts actor "a" on n's first worker and checkpoints
// it with opts, returning the request that starts it from that snapshot
// (without a Spec: the caller's case sets it).
func startAndCheckpoint(t *testing.T, n *Node, opts CheckpointOptions) StartRequest {
	t.Helper()
	w := n.order[0]
	if err := n.Start(t.Context(), StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	ref, err := n.Checkpoint(t.Context(), w, "a", opts)
	if err != nil {
		t.Fatal(err)
	}
	return StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Snapshot: ref, Paused: opts.Paused}
}

// skipProbe is spec with a wakeup probe that runs after a boot only.
func skipProbe(spec *atev1.ActorTemplateSpec) *atev1.ActorTemplateSpec {
	spec.WakeupProbe = &atev1.Probe{AfterRestore: atev1.ProbeAfterRestoreSkip}
	return spec
}

// TestRestoreNotificationFiles: every start — golden build, restore of
// the golden snapshot into a new actor, of an actor's own durable
// snapshot, of its paused checkpoint, a cold boot — finds a new
// generation, larger than every earlier one, and fresh random bytes in
// place when the sandbox starts, i.e. before the wakeup probe or any
// request.
func TestRestoreNotificationFiles(t *testing.T) {
	rt := newNoticeRuntime(t)
	n := newTestNodeWith(t, rt, false)
	ctx := t.Context()
	w := n.order[0]
	spec := template("img1")
	golden, _, err := n.BuildGolden(ctx, "tpl", "ns", "tpl", spec, "")
	if err != nil {
		t.Fatal(err)
	}
	start := func(uid, ref string, paused bool) {
		t.Helper()
		if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: uid, Atespace: "ns", Name: uid, Spec: spec, Snapshot: ref, Paused: paused}); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := func(uid string, paused bool) string {
		t.Helper()
		ref, err := n.Checkpoint(ctx, w, uid, CheckpointOptions{Scope: snapshot.ScopeFull, Paused: paused})
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	start("a", golden, false) // the golden snapshot into a new actor
	start("a", checkpoint("a", false), false)
	start("a", checkpoint("a", true), true)
	checkpoint("a", false)
	start("b", golden, false) // a second actor of the same snapshot
	if err := n.Stop(ctx, w, "b"); err != nil {
		t.Fatal(err)
	}
	start("c", "", false) // cold boot

	seen := rt.starts()
	wantOps := []string{"run", "restore", "restore", "restore", "restore", "run"}
	if len(seen) != len(wantOps) {
		t.Fatalf("runtime saw %d starts (%+v), want %d", len(seen), seen, len(wantOps))
	}
	var prev uint64
	randoms := map[string]bool{}
	for i, s := range seen {
		if s.op != wantOps[i] {
			t.Errorf("start %d was a %s, want %s", i, s.op, wantOps[i])
		}
		gen, err := strconv.ParseUint(s.generation, 10, 64)
		if err != nil {
			t.Fatalf("start %d (%s): generation %q is not a decimal uint64: %v", i, s.op, s.generation, err)
		}
		if gen <= prev {
			t.Errorf("start %d (%s): generation %d, not above the previous %d", i, s.op, gen, prev)
		}
		prev = gen
		if b, err := hex.DecodeString(s.random); err != nil || len(b) != 32 {
			t.Errorf("start %d (%s): random %q is not 32 bytes of hex (%v)", i, s.op, s.random, err)
		}
		if randoms[s.random] {
			t.Errorf("start %d (%s): random %q repeats an earlier start's", i, s.op, s.random)
		}
		randoms[s.random] = true
	}
	// The host files still hold what the last start found (nothing
	// rewrites them while the actor runs).
	if got, _ := os.ReadFile(n.workerDir(n.slots[w], "identity", "generation")); string(got) != seen[len(seen)-1].generation {
		t.Errorf("generation file after the last start = %q, want %q", got, seen[len(seen)-1].generation)
	}
}

// TestRestoreHook: the onRestore hook is called once after every restore
// (the golden snapshot into a new actor, an actor's own snapshot, a paused
// checkpoint) and never after a boot (cold boot, golden build, Data-scope
// snapshot); it is a POST with an empty body made before the tunnel admits
// the actor's traffic; and anything but 2xx in time fails the start with
// ErrStartFailed and an empty worker.
func TestRestoreHook(t *testing.T) {
	// Each prepare readies what the case's Start needs on n's worker and
	// returns the request (its Spec is filled in from the case).
	// The build's template has the hook, and until the case sets its
	// handler the hook port answers 404: a build that called it fails.
	golden := func(t *testing.T, n *Node) StartRequest {
		t.Helper()
		ref, _, err := n.BuildGolden(t.Context(), "tpl", "ns", "tpl", withHook(0), "")
		if err != nil {
			t.Fatal(err)
		}
		return StartRequest{Worker: n.order[0], ActorUID: "b", Atespace: "ns", Name: "b", Snapshot: ref}
	}
	for _, tc := range []struct {
		name    string
		spec    *atev1.ActorTemplateSpec
		prepare func(*testing.T, *Node) StartRequest
		status  int  // the hook's answer
		hang    bool // the hook never answers
		calls   int  // hook calls the final Start makes
		wantErr string
	}{
		{name: "restore of the golden snapshot", spec: withHook(0), prepare: golden, status: http.StatusNoContent, calls: 1},
		{name: "restore of the actor's own snapshot", spec: withHook(0), status: http.StatusOK, calls: 1,
			prepare: func(t *testing.T, n *Node) StartRequest {
				return startAndCheckpoint(t, n, CheckpointOptions{Scope: snapshot.ScopeFull})
			}},
		{name: "restore of a paused checkpoint", spec: withHook(0), status: http.StatusNoContent, calls: 1,
			prepare: func(t *testing.T, n *Node) StartRequest {
				return startAndCheckpoint(t, n, CheckpointOptions{Scope: snapshot.ScopeFull, Paused: true})
			}},
		{name: "Data snapshot cold-boots", spec: withHook(0), status: http.StatusNoContent, calls: 0,
			prepare: func(t *testing.T, n *Node) StartRequest {
				return startAndCheckpoint(t, n, CheckpointOptions{Scope: snapshot.ScopeData})
			}},
		{name: "cold boot", spec: withHook(0), status: http.StatusNoContent, calls: 0,
			prepare: func(_ *testing.T, n *Node) StartRequest {
				return StartRequest{Worker: n.order[0], ActorUID: "a", Atespace: "ns", Name: "a"}
			}},
		{name: "wakeup probe skipped after the restore", spec: skipProbe(withHook(0)), prepare: golden, status: http.StatusNoContent, calls: 1},
		{name: "no hook", spec: template("img1"), prepare: golden, status: http.StatusNoContent, calls: 0},
		{name: "hook answers 500", spec: withHook(0), prepare: golden, status: http.StatusInternalServerError, calls: 1,
			wantErr: "onRestore hook POST /ate/restored on port 9000: answered 500"},
		{name: "hook answers 301", spec: withHook(0), prepare: golden, status: http.StatusMovedPermanently, calls: 1,
			wantErr: "answered 301"},
		{name: "hook times out", spec: withHook(1), prepare: golden, hang: true, calls: 1,
			wantErr: "onRestore hook POST /ate/restored on port 9000: no answer within 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newNoticeRuntime(t)
			n := newTestNodeWith(t, rt, false)
			req := tc.prepare(t, n)
			req.Spec = tc.spec
			var mu sync.Mutex
			var calls []string
			rt.setHook(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				_, _, release, admitted := n.enter(req.Worker, req.ActorUID, plainRequest())
				if admitted {
					release()
				}
				mu.Lock()
				calls = append(calls, r.Method+" "+r.URL.RequestURI())
				mu.Unlock()
				if len(body) != 0 || admitted {
					t.Errorf("hook call: body %q, tunnel admitted the actor's traffic %v; want no body, nothing admitted", body, admitted)
				}
				if tc.hang {
					<-r.Context().Done()
					return
				}
				w.WriteHeader(tc.status)
			}))
			err := n.Start(t.Context(), req)
			mu.Lock()
			got := calls
			mu.Unlock()
			if len(got) != tc.calls {
				t.Fatalf("hook calls %q, want %d", got, tc.calls)
			}
			for _, c := range got {
				if c != "POST /ate/restored" {
					t.Errorf("hook call %q, want POST /ate/restored", c)
				}
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				_, _, release, ok := n.enter(req.Worker, req.ActorUID, plainRequest())
				if !ok {
					t.Fatal("tunnel refuses the actor after Start returned")
				}
				release()
				return
			}
			if !errors.Is(err, ErrStartFailed) || err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Start = %v, want ErrStartFailed containing %q", err, tc.wantErr)
			}
			if id, ok := rt.Container(req.Worker); ok {
				t.Fatalf("worker still hosts container %s after a failed hook", id)
			}
			if _, _, _, ok := n.enter(req.Worker, req.ActorUID, plainRequest()); ok {
				t.Fatal("tunnel admits the actor after its start failed")
			}
		})
	}
}
