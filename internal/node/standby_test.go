package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/testwait"
)

// stubImages serves one unpacked image for every reference: the fake
// sandbox never reads the root filesystem. A pull of no atespace fails:
// every start, golden build and standby pulls with its atespace's
// registry credentials.
type stubImages struct{ rootfs string }

func (s stubImages) EnsurePinned(_ context.Context, atespace, ref, _ string) (*image.Image, error) {
	if atespace == "" {
		return nil, fmt.Errorf("image %s pulled as no atespace", ref)
	}
	return &image.Image{Digest: "sha256:" + ref, RootFS: s.rootfs, Config: image.Config{Cmd: []string{"/counter"}}}, nil
}

func newTestNode(t *testing.T, rt *fake.Runtime) *Node {
	t.Helper()
	return newTestNodeWith(t, rt, false)
}

// newTestNodeWith is newTestNode on any runtime, standbys on or off,
// its Config changed by each of configure.
func newTestNodeWith(t *testing.T, rt sandbox.Runtime, noStandbys bool, configure ...func(*Config)) *Node {
	t.Helper()
	dir := t.TempDir()
	snaps, err := snapshot.NewLocal(filepath.Join(dir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	paused, err := snapshot.NewLocal(filepath.Join(dir, "paused"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Name: "n1", Workers: 1, WorkerPrefix: "n1", SandboxClass: "fake", Runtime: rt,
		Setup: fake.Setup, Images: stubImages{rootfs: t.TempDir()},
		Snapshots: snaps, Paused: paused, StateDir: filepath.Join(dir, "state"), NoStandbys: noStandbys,
	}
	for _, f := range configure {
		f(&cfg)
	}
	n, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown(context.Background()) })
	return n
}

func template(image string) *atev1.ActorTemplateSpec {
	return &atev1.ActorTemplateSpec{
		Containers: []*atev1.ContainerSpec{{Name: "app", Image: image, VolumeMounts: []*atev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Volumes:    []*atev1.Volume{{Name: "data"}},
	}
}

// waitPrepared waits until the fake runtime holds want prepared containers.
func waitPrepared(t *testing.T, rt *fake.Runtime, want int) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("%d prepared containers", want), func() bool { return rt.Prepared() == want })
}

// standbyOf returns s's standby once no operation runs on s: a refill
// that made the runtime's prepared container records it only afterwards.
func standbyOf(s *slot) string {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.standby.mu.Lock()
	defer s.standby.mu.Unlock()
	if s.standby.spec == nil {
		return ""
	}
	return s.standby.spec.ID
}

// checkpointed starts actor "a" of template img1 on n's worker, leaves a
// file in its volume, checkpoints it and waits for the freed worker's
// standby. It returns the worker, its volume directory, a's snapshot and
// the standby's container id.
func checkpointed(t *testing.T, n *Node, rt *fake.Runtime) (w, vol, ref, standbyID string) {
	t.Helper()
	w = n.order[0]
	vol = n.workerDir(n.slots[w], "volumes", "data")
	if err := n.Start(t.Context(), StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	if rt.Prepared() != 0 {
		t.Fatal("a worker hosting an actor holds a standby")
	}
	if err := os.WriteFile(filepath.Join(vol, "mine"), []byte("a's"), 0o600); err != nil {
		t.Fatal(err)
	}
	ref, err := n.Checkpoint(t.Context(), w, "a", CheckpointOptions{Scope: snapshot.ScopeFull})
	if err != nil {
		t.Fatal(err)
	}
	waitPrepared(t, rt, 1)
	return w, vol, ref, standbyOf(n.slots[w])
}

// TestStandby: a freed worker prepares a standby for the template it hosted;
// the next actor of that template starts in it, one of another template
// gets it destroyed, and no actor sees the previous one's volume.
func TestStandby(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	ctx := t.Context()
	w, vol, refA, standbyID := checkpointed(t, n, rt)
	if entries, _ := os.ReadDir(vol); len(entries) != 0 {
		t.Fatalf("volume directory after checkpoint holds %d entries, want none", len(entries))
	}

	// Same template: starts in the standby, with an empty volume.
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "b", Atespace: "ns", Name: "b", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	if id, _ := rt.Container(w); id != standbyID {
		t.Fatalf("b runs in container %s, want the standby %s", id, standbyID)
	}
	if _, err := os.Stat(filepath.Join(vol, "mine")); !os.IsNotExist(err) {
		t.Fatalf("b sees a's volume file (stat err %v)", err)
	}
	if got, _ := os.ReadFile(n.workerDir(n.slots[w], "identity", "actor-name")); string(got) != "b" {
		t.Fatalf("identity actor-name = %q, want b", got)
	}
	if err := n.Stop(ctx, w, "b"); err != nil {
		t.Fatal(err)
	}
	waitPrepared(t, rt, 1)
	standbyOf(n.slots[w]) // the refill has finished
	if got := n.StandbyWorkers(template("img1"), "sha256:img1"); len(got) != 1 || got[0] != w {
		t.Fatalf("StandbyWorkers(img1) = %v, want [%s]", got, w)
	}
	if got := n.StandbyWorkers(template("img2"), "sha256:img2"); len(got) != 0 {
		t.Fatalf("StandbyWorkers(img2) = %v, want none: the standby is for img1", got)
	}

	// Another template: the standby is destroyed, a restores afresh and
	// finds its own volume.
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img2"), Snapshot: refA}); err != nil {
		t.Fatal(err)
	}
	if rt.Prepared() != 0 || rt.Len() != 1 {
		t.Fatalf("prepared %d, running %d after a start of another template; want 0, 1", rt.Prepared(), rt.Len())
	}
	if got, err := os.ReadFile(filepath.Join(vol, "mine")); err != nil || string(got) != "a's" {
		t.Fatalf("a's volume after restore = %q, %v", got, err)
	}
}

// heldCheckpoints is the fake runtime with each Checkpoint held, once it
// has begun, until release closes; unfrozen counts the containers
// prepared in a slot whose running container was not frozen.
type heldCheckpoints struct {
	*fake.Runtime
	began    chan struct{}
	release  chan struct{}
	mu       sync.Mutex
	frozen   map[string]bool
	unfrozen int
}

func (h *heldCheckpoints) Freeze(ctx context.Context, slot sandbox.Slot, id string) error {
	h.mu.Lock()
	h.frozen[id] = true
	h.mu.Unlock()
	return h.Runtime.Freeze(ctx, slot, id)
}

func (h *heldCheckpoints) Prepare(ctx context.Context, slot sandbox.Slot, spec sandbox.Spec) error {
	if id, ok := h.Container(slot.Name); ok {
		h.mu.Lock()
		if !h.frozen[id] {
			h.unfrozen++
		}
		h.mu.Unlock()
	}
	return h.Runtime.Prepare(ctx, slot, spec)
}

func (h *heldCheckpoints) Checkpoint(ctx context.Context, slot sandbox.Slot, id, imageDir string) error {
	h.began <- struct{}{}
	<-h.release
	return h.Runtime.Checkpoint(ctx, slot, id, imageDir)
}

// noVolumes is a template of image with no volumes.
func noVolumes(image string) *atev1.ActorTemplateSpec {
	return &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "app", Image: image}}}
}

// TestStandbyPreparedBesideCheckpoint: a worker whose actor is
// checkpointed creates its next standby while the checkpoint runs, so
// the start that follows at once (an eviction's) finds it ready; and the
// checkpointed actor restores into it with its state.
func TestStandbyPreparedBesideCheckpoint(t *testing.T) {
	rt := fake.New(fake.Config{})
	h := &heldCheckpoints{Runtime: rt, began: make(chan struct{}, 1), release: make(chan struct{}), frozen: map[string]bool{}}
	n := newTestNodeWith(t, h, false)
	// Registered after the node's Shutdown, so run before it: a failed
	// wait must not leave the checkpoint, and Shutdown, held.
	release := sync.OnceFunc(func() { close(h.release) })
	t.Cleanup(release)
	ctx := t.Context()
	w := n.order[0]
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: noVolumes("img1")}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ref string
		err error
	}
	done := make(chan result, 1)
	go func() {
		ref, err := n.Checkpoint(ctx, w, "a", CheckpointOptions{Scope: snapshot.ScopeFull})
		done <- result{ref, err}
	}()
	<-h.began
	waitPrepared(t, rt, 1) // while the checkpoint is held
	release()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	standbyID := standbyOf(n.slots[w])
	if standbyID == "" {
		t.Fatal("no standby recorded once the checkpoint returned")
	}
	if got := n.StandbyWorkers(noVolumes("img1"), "sha256:img1"); len(got) != 1 || got[0] != w {
		t.Fatalf("StandbyWorkers(img1) = %v, want [%s]", got, w)
	}
	h.mu.Lock()
	unfrozen := h.unfrozen
	h.mu.Unlock()
	if unfrozen != 0 {
		t.Errorf("%d standbys prepared beside a running actor, want it frozen first (it would run without its network)", unfrozen)
	}
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "b", Atespace: "ns", Name: "b", Spec: noVolumes("img1"), Snapshot: res.ref}); err != nil {
		t.Fatal(err)
	}
	if id, _ := rt.Container(w); id != standbyID {
		t.Fatalf("the restore runs in container %s, want the standby %s", id, standbyID)
	}
}

// failedCheckpoint is the fake runtime whose Checkpoint, once victim is
// set, fails leaving the container running, and whose Destroy of victim
// fails too: a sandbox that outlived its destroy.
type failedCheckpoint struct {
	*fake.Runtime
	victim   atomic.Pointer[string]
	prepares atomic.Int32
}

func (r *failedCheckpoint) Prepare(ctx context.Context, slot sandbox.Slot, spec sandbox.Spec) error {
	r.prepares.Add(1)
	return r.Runtime.Prepare(ctx, slot, spec)
}

func (r *failedCheckpoint) Checkpoint(ctx context.Context, slot sandbox.Slot, id, imageDir string) error {
	if r.victim.Load() != nil {
		return errors.New("runsc checkpoint: sandbox did not answer")
	}
	return r.Runtime.Checkpoint(ctx, slot, id, imageDir)
}

func (r *failedCheckpoint) Destroy(ctx context.Context, slot sandbox.Slot, id string) error {
	if v := r.victim.Load(); v != nil && *v == id {
		return errors.New("runsc delete: sandbox did not stop")
	}
	return r.Runtime.Destroy(ctx, slot, id)
}

// TestNoStandbyBesideALeftover: a standby prepared beside a checkpoint
// that failed, and whose container then outlived its destroy, is
// destroyed rather than offered: the worker hosts nothing until that
// container is gone.
func TestNoStandbyBesideALeftover(t *testing.T) {
	rt := fake.New(fake.Config{})
	failing := &failedCheckpoint{Runtime: rt}
	n := newTestNodeWith(t, failing, false)
	w := n.order[0]
	ctx := t.Context()
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: noVolumes("img1")}); err != nil {
		t.Fatal(err)
	}
	victim, _ := rt.Container(w)
	failing.victim.Store(&victim)
	failing.prepares.Store(0)
	t.Cleanup(func() { _ = rt.Close() }) // the leftover, which the node cannot destroy
	if _, err := n.Checkpoint(ctx, w, "a", CheckpointOptions{Scope: snapshot.ScopeFull}); err == nil {
		t.Fatal("checkpoint succeeded, want its failure")
	}
	if got := failing.prepares.Load(); got != 1 {
		t.Fatalf("%d standbys prepared beside the checkpoint, want 1", got)
	}
	if id := standbyOf(n.slots[w]); id != "" || rt.Prepared() != 0 {
		t.Fatalf("standby %q, %d prepared containers beside a leftover; want none", id, rt.Prepared())
	}
	if got := n.StandbyWorkers(noVolumes("img1"), "sha256:img1"); len(got) != 0 {
		t.Fatalf("StandbyWorkers(img1) = %v, want none", got)
	}
}

// TestStandbyGoneStillStarts: a standby that died (here: destroyed behind
// the node's back) costs a retry, not the start, nor the volume data the
// start restores from the snapshot.
func TestStandbyGoneStillStarts(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	ctx := t.Context()
	w, vol, ref, id := checkpointed(t, n, rt)
	if err := rt.Destroy(ctx, n.slots[w].sb, id); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1"), Snapshot: ref}); err != nil {
		t.Fatalf("start after the standby vanished: %v", err)
	}
	if got, _ := rt.Container(w); got == id || got == "" {
		t.Fatalf("container after retry = %q; want a fresh one", got)
	}
	if got, err := os.ReadFile(filepath.Join(vol, "mine")); err != nil || string(got) != "a's" {
		t.Fatalf("volume after the retried start = %q, %v; want the snapshot's", got, err)
	}
}

// TestGoldenBuildOffersTemplate: workers that never hosted an actor prepare
// a standby for a template as soon as its golden snapshot is built.
func TestGoldenBuildOffersTemplate(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	if _, _, err := n.BuildGolden(t.Context(), "tpl", "ns", "counter", template("img1"), ""); err != nil {
		t.Fatal(err)
	}
	waitPrepared(t, rt, 1)
}

// TestNoStandbys: with standbys turned off a freed worker holds nothing,
// and starts go the ordinary way.
func TestNoStandbys(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNodeWith(t, rt, true)
	w := n.order[0]
	ctx := t.Context()
	if _, _, err := n.BuildGolden(ctx, "tpl", "ns", "counter", template("img1"), ""); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
			t.Fatal(err)
		}
		if err := n.Stop(ctx, w, "a"); err != nil {
			t.Fatal(err)
		}
	}
	// A refill run now, by hand and to its end, must prepare nothing.
	s := n.slots[w]
	s.opMu.Lock()
	err := n.refillOp(s)
	s.opMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.Prepared(); got != 0 {
		t.Fatalf("%d standbys prepared with standbys off", got)
	}
}

// TestStopKeepsInflightCount: a request still in flight when its actor is
// stopped releases its count afterwards; the count must come back to zero,
// not below, or the next checkpoint's drain would not wait.
func TestStopKeepsInflightCount(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	w := n.order[0]
	ctx := t.Context()
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	_, _, release, ok := n.enter(w, "a", plainRequest())
	if !ok {
		t.Fatal("request not admitted")
	}
	if err := n.Stop(ctx, w, "a"); err != nil {
		t.Fatal(err)
	}
	release()
	s := n.slots[w]
	s.gate.mu.Lock()
	got := s.gate.inflight
	s.gate.mu.Unlock()
	if got != 0 {
		t.Fatalf("in-flight count after the request ended = %d, want 0", got)
	}
}

// TestStandbyProbeFailureNotRetried: a start into a standby whose wakeup
// probe fails is the actor's failure, not the standby's: it is not tried
// again afresh (which would wait out the probe's timeout twice), and the
// freed worker prepares a standby again.
func TestStandbyProbeFailureNotRetried(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	w, _, ref, standbyID := checkpointed(t, n, rt)
	bad := template("img1")
	bad.WakeupProbe = &atev1.Probe{HttpGet: &atev1.HTTPGetAction{Path: "/missing", Port: 8080}, TimeoutSeconds: 1}
	if err := n.Start(t.Context(), StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: bad, Snapshot: ref}); err == nil {
		t.Fatal("start with a failing probe succeeded")
	}
	log, err := os.ReadFile(n.workerLog(n.slots[w]))
	if err != nil {
		t.Fatal(err)
	}
	// One start line for a's first start, one for the failed one.
	if starts := strings.Count(string(log), "--- "); starts != 2 {
		t.Fatalf("worker log records %d starts, want 2:\n%s", starts, log)
	}
	// The failed start went into the standby; otherwise it is never
	// retried anyway and this test would prove nothing.
	if !strings.Contains(string(log), "container="+standbyID+" ") {
		t.Fatalf("the failed start did not use standby %s:\n%s", standbyID, log)
	}
	waitPrepared(t, rt, 1)
}

// TestAfterStarts: a deferred refill waits for the start that follows
// the suspend which freed its worker and goes as soon as that start has
// ended, not a fixed time later; with no start it goes after its grace,
// and a start under way then is waited for.
func TestAfterStarts(t *testing.T) {
	wait := func(t *testing.T, st *standbys, grace, most time.Duration) <-chan struct{} {
		done := make(chan struct{})
		from := st.startsEnded()
		go func() {
			st.afterStarts(t.Context().Done(), from, grace, most, func() bool { return true })
			close(done)
		}()
		return done
	}
	returned := func(t *testing.T, done <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("afterStarts did not return %s", what)
		}
	}
	pending := func(t *testing.T, done <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-done:
			t.Fatalf("afterStarts returned %s", what)
		default:
		}
	}
	t.Run("a start comes and ends", func(t *testing.T) {
		var st standbys
		done := wait(t, &st, time.Hour, time.Hour)
		st.startBegan()
		pending(t, done, "while the start was under way")
		st.startEnded()
		returned(t, done, "once the start ended, within its hour of grace")
	})
	t.Run("no start: the grace", func(t *testing.T) {
		var st standbys
		returned(t, wait(t, &st, time.Millisecond, time.Hour), "after its grace")
	})
	t.Run("no longer wanted: the first start that ends", func(t *testing.T) {
		var st standbys
		st.startBegan()
		st.startBegan()
		from := st.startsEnded()
		done := make(chan struct{})
		go func() {
			st.afterStarts(t.Context().Done(), from, time.Hour, time.Hour, func() bool { return false })
			close(done)
		}()
		st.startEnded()
		returned(t, done, "once a start ended and the wait was no longer wanted, another under way")
		st.startEnded()
	})
	t.Run("starts that never end: at most its bound", func(t *testing.T) {
		var st standbys
		st.startBegan()
		returned(t, wait(t, &st, time.Hour, time.Millisecond), "at its bound")
	})
	t.Run("a start under way when the grace ends", func(t *testing.T) {
		var st standbys
		st.startBegan()
		done := wait(t, &st, time.Millisecond, time.Hour)
		pending(t, done, "with the start under way")
		st.startEnded()
		returned(t, done, "once the start ended")
	})
}
