package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/actorlog"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
	"substrate.dev/ate/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeNode stands in for the node agent (the lifecycle's neighbour): it
// records what it was asked and lets a test inject what happens.
type fakeNode struct {
	name   string
	starts atomic.Int64
	stops  atomic.Int64
	// onStart, if set, runs inside Start and its error is Start's.
	onStart func(req nodeapi.StartRequest) error
	// onCheckpoint, if set, runs inside Checkpoint.
	onCheckpoint func()
	// onUpload, if set, runs inside Upload.
	onUpload func()
	// onStop, if set, runs inside Stop.
	onStop func()
	// stopErr, if set, is Stop's error.
	stopErr error
	// deletedPaused counts DeletePaused calls.
	deletedPaused atomic.Int64
	// reportRef, if set, is the reference Checkpoint reports, whatever
	// it was asked to write (a compromised node's answer).
	reportRef string
	mu        sync.Mutex
	last      nodeapi.StartRequest
	// lastCheckpoint is what Checkpoint was last asked.
	lastCheckpoint nodeapi.CheckpointOptions
	// standbys is what StandbyWorkers answers; standbyFor and
	// standbyDigest are what it was last asked.
	standbys      []string
	standbyFor    *atev1.ActorTemplateSpec
	standbyDigest string
	// activity is what WorkerActivity answers, by worker; a worker
	// missing from it hosts nothing the tunnel saw.
	activity map[string]nodeapi.Activity
	// hosted is what HostedActors answers: worker → actor uid.
	hosted map[string]string
	// unreachable, while set, fails Start, Checkpoint and Stop as a
	// node that does not answer (nodeapi.ErrUnreachable).
	unreachable atomic.Bool
	// gone, while set, fails Checkpoint as a node whose worker no
	// longer hosts the actor (nodeapi.ErrStale).
	gone atomic.Bool
	// checkpointErr, if set, is Checkpoint's error (an answer that
	// says nothing of the sandbox).
	checkpointErr error
	// checkpoints counts Checkpoint calls that reached the node.
	checkpoints atomic.Int64
	// fences lists the lease token (nodeapi.FenceFrom) each Start,
	// Checkpoint and Stop carried, as "start 12".
	fences []string
}

func (f *fakeNode) fenced(ctx context.Context, op string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fences = append(f.fences, fmt.Sprint(op, " ", nodeapi.FenceFrom(ctx)))
}

func (f *fakeNode) Name() string { return f.name }
func (f *fakeNode) Start(ctx context.Context, req nodeapi.StartRequest) error {
	f.fenced(ctx, "start")
	f.starts.Add(1)
	if f.unreachable.Load() {
		return fmt.Errorf("%w: node %s: connection refused", nodeapi.ErrUnreachable, f.name)
	}
	f.mu.Lock()
	f.last = req
	f.mu.Unlock()
	if f.onStart != nil {
		return f.onStart(req)
	}
	return nil
}
func (f *fakeNode) Checkpoint(ctx context.Context, _, uid string, o nodeapi.CheckpointOptions) (string, error) {
	f.fenced(ctx, "checkpoint")
	if f.unreachable.Load() {
		return "", fmt.Errorf("%w: node %s: connection refused", nodeapi.ErrUnreachable, f.name)
	}
	f.checkpoints.Add(1)
	if f.gone.Load() {
		return "", fmt.Errorf("checkpoint %s: %w", uid, nodeapi.ErrStale)
	}
	if f.checkpointErr != nil {
		return "", f.checkpointErr
	}
	if f.onCheckpoint != nil {
		f.onCheckpoint()
	}
	f.mu.Lock()
	f.lastCheckpoint = o
	f.mu.Unlock()
	if o.Owner != "" {
		uid = o.Owner
	}
	if f.reportRef != "" {
		return f.reportRef, nil
	}
	if o.ID != "" {
		return uid + "/" + o.ID, nil
	}
	return uid + "/snap-" + time.Now().Format("150405.000000000"), nil
}
func (f *fakeNode) Stop(ctx context.Context, _, _ string) error {
	f.fenced(ctx, "stop")
	if f.unreachable.Load() {
		return fmt.Errorf("%w: node %s: connection refused", nodeapi.ErrUnreachable, f.name)
	}
	f.stops.Add(1)
	if f.onStop != nil {
		f.onStop()
	}
	return f.stopErr
}
func (f *fakeNode) FenceActor(ctx context.Context, _ string) error {
	f.fenced(ctx, "fence")
	return nil
}
func (f *fakeNode) BuildGolden(context.Context, string, string, string, *atev1.ActorTemplateSpec, string) (string, string, error) {
	return "", "", nil
}
func (f *fakeNode) Upload(_ context.Context, _, owner, _ string, _ snapshot.Scope) (string, error) {
	if f.onUpload != nil {
		f.onUpload()
	}
	return owner + "/uploaded", nil
}
func (f *fakeNode) DeletePaused(string) error { f.deletedPaused.Add(1); return nil }
func (f *fakeNode) ForgetActor(string)        {}
func (f *fakeNode) HostedActors(context.Context) (map[string]string, error) {
	if f.unreachable.Load() {
		return nil, fmt.Errorf("%w: node %s: connection refused", nodeapi.ErrUnreachable, f.name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.hosted), nil
}
func (f *fakeNode) ReadActorLogs(context.Context, string, actorlog.Cursor, int) ([]actorlog.Line, error) {
	return nil, nil
}

// The workflows never exec or copy (the API server does, through
// Manager.NodeOf).
func (f *fakeNode) Exec(context.Context, nodeapi.ExecRequest) (int, error) {
	return 0, nodeapi.ErrExecUnsupported
}
func (f *fakeNode) CopyIn(context.Context, string, string, string, fs.FileMode, io.Reader) (int64, error) {
	return 0, nodeapi.ErrExecUnsupported
}
func (f *fakeNode) CopyOut(context.Context, string, string, string, io.Writer) (int64, error) {
	return 0, nodeapi.ErrExecUnsupported
}

var _ nodeapi.Node = (*fakeNode)(nil)

func (f *fakeNode) WorkerActivity(worker string) (nodeapi.Activity, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.activity[worker]
	return a, ok
}

// setActivity sets what WorkerActivity answers for worker.
func (f *fakeNode) setActivity(worker string, a nodeapi.Activity) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.activity == nil {
		f.activity = map[string]nodeapi.Activity{}
	}
	f.activity[worker] = a
}

func (f *fakeNode) StandbyWorkers(spec *atev1.ActorTemplateSpec, imageDigest string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.standbyFor, f.standbyDigest = spec, imageDigest
	return f.standbys
}

type env struct {
	st    store.Store
	node  *fakeNode
	snaps *snapshot.Local
	m     *Manager
	actor *store.Actor
}

// newEnv makes a real bolt store with one template, one actor and two
// workers on node "n1".
func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	snaps, err := snapshot.NewLocal(filepath.Join(dir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must(t, st.CreateAtespace(ctx, &store.Atespace{Name: "default"}))
	must(t, st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl", UID: "tpl-uid",
		Phase: store.TemplateReady, GoldenSnapshot: "tpl-uid/golden", ImageDigest: "sha256:tpl",
		Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}}, NewActors: NewActorsGolden}}))
	a := &store.Actor{Atespace: "default", Name: "a", UID: "a-uid", Template: "tpl", Lifecycle: store.Lifecycle{State: store.Suspended}}
	must(t, st.CreateActor(ctx, a))
	for _, w := range []string{"w0", "w1"} {
		must(t, st.PutWorker(ctx, &store.Worker{Name: w, Node: "n1"}))
	}
	n := &fakeNode{name: "n1"}
	m := New(st, testNodes{n: n, live: []string{"n1", "n2"}}, snaps, "test", nil)
	t.Cleanup(m.Close)
	return &env{st: st, node: n, snaps: snaps, m: m, actor: a}
}

// testNodes answers for every node in live with the one fake node, as
// if each were registered.
type testNodes struct {
	n    nodeapi.Node
	live []string
}

func (t testNodes) Get(name string) (nodeapi.Node, bool)  { return t.n, slices.Contains(t.live, name) }
func (t testNodes) ForWorker(string) (nodeapi.Node, bool) { return t.n, true }
func (t testNodes) Lost(string) bool                      { return false }
func (t testNodes) ByLoad() []string                      { return t.live }
func (t testNodes) All() []nodeapi.Node                   { return []nodeapi.Node{t.n} }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) get(t *testing.T) *store.Actor {
	t.Helper()
	a, err := e.st.GetActor(context.Background(), key("a"))
	must(t, err)
	return a
}

// resume resumes the actor, failing the test if that fails.
func (e *env) resume(t *testing.T) {
	t.Helper()
	if _, err := e.m.Resume(context.Background(), key("a")); err != nil {
		t.Fatal(err)
	}
}

func (e *env) claimedWorkers(t *testing.T) int {
	t.Helper()
	ws, err := e.st.ListWorkers(context.Background())
	must(t, err)
	n := 0
	for _, w := range ws {
		if !w.Free() {
			n++
		}
	}
	return n
}

func TestResumeCoalesces(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := e.m.Resume(context.Background(), key("a")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := e.node.starts.Load(); got != 1 {
		t.Fatalf("20 concurrent resumes started the actor %d times, want 1", got)
	}
	if a := e.get(t); a.State != store.Running || a.Resumes != 1 || e.node.last.Snapshot != "tpl-uid/golden" {
		t.Fatalf("actor %+v, restored %q", a, e.node.last.Snapshot)
	}
}

// TestUnreachableNodeKeepsItsActor: a node that does not answer, and is
// not declared lost, may still serve the actor from its sandbox. No
// workflow frees the actor's worker then — not a suspend, a resume that
// finds it mid-suspend, nor a forced delete — or the actor could run in
// two places; each fails UNAVAILABLE-like (ErrNodeUnavailable) and leaves
// the actor on its worker until the node answers.
func TestUnreachableNodeKeepsItsActor(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.resume(t)
	on := e.get(t).Worker
	e.node.unreachable.Store(true)
	stays := func(step string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNodeUnavailable) {
			t.Fatalf("%s = %v, want ErrNodeUnavailable", step, err)
		}
		if a := e.get(t); a.Worker != on || a.State == store.Crashed {
			t.Fatalf("after %s: actor %s on %q, want it kept on %s", step, a.State, a.Worker, on)
		}
		if n := e.claimedWorkers(t); n != 1 {
			t.Fatalf("after %s: %d workers claimed, want the actor's", step, n)
		}
	}
	_, err := e.m.Suspend(ctx, key("a"))
	stays("suspend", err)
	_, err = e.m.Resume(ctx, key("a"))
	stays("resume of the interrupted suspend", err)
	stays("forced delete", e.m.Delete(ctx, key("a"), true))
	// The node answers again: the interrupted suspend is completed
	// there (its sandbox, still running, is checkpointed, not stopped
	// and rolled back), and the actor resumes from that snapshot.
	e.node.unreachable.Store(false)
	if _, err := e.m.Resume(ctx, key("a")); err != nil {
		t.Fatalf("resume once the node answers: %v", err)
	}
	if a, from := e.get(t), e.node.last.Snapshot; a.State != store.Running || !strings.HasPrefix(from, a.UID+"/") {
		t.Fatalf("actor %s after the node answered, resumed from %q; want RUNNING from the snapshot its node took", a.State, from)
	}
}

// TestStartOnUnreachableNodeKeepsTheWorker: a start the node did not
// answer may have started the sandbox: the actor stays RESUMING on its
// worker until the node answers, then is rolled back and resumes.
func TestStartOnUnreachableNodeKeepsTheWorker(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.node.unreachable.Store(true)
	if _, err := e.m.Resume(ctx, key("a")); !errors.Is(err, ErrNodeUnavailable) {
		t.Fatalf("Resume = %v, want ErrNodeUnavailable", err)
	}
	if a := e.get(t); a.State != store.Resuming || a.Worker == "" {
		t.Fatalf("actor %s on %q after a start the node did not answer, want RESUMING on its worker", a.State, a.Worker)
	}
	e.node.unreachable.Store(false)
	if _, err := e.m.Resume(ctx, key("a")); err != nil {
		t.Fatalf("resume once the node answers: %v", err)
	}
	if a := e.get(t); a.State != store.Running {
		t.Fatalf("actor %s, want RUNNING", a.State)
	}
}

func TestFailedStartLeavesActorResumable(t *testing.T) {
	e := newEnv(t)
	e.node.onStart = func(nodeapi.StartRequest) error { return errors.New("injected restore failure") }
	_, err := e.m.Resume(context.Background(), key("a"))
	if !errors.Is(err, ErrResumeFailed) {
		t.Fatalf("Resume = %v, want ErrResumeFailed", err)
	}
	a := e.get(t)
	if a.State != store.Suspended || a.Worker != "" || !strings.Contains(a.Message, "injected") {
		t.Fatalf("after failed start: %+v", a)
	}
	if n := e.claimedWorkers(t); n != 0 {
		t.Fatalf("%d workers still claimed", n)
	}
	e.node.onStart = nil
	if _, err := e.m.Resume(context.Background(), key("a")); err != nil {
		t.Fatalf("resume after a failure: %v", err)
	}
}

// TestWorkerLostBetweenRestoreAndRunning deletes the worker after the
// restore returned but before the actor is marked RUNNING: the actor must
// not end RUNNING without a worker, nor lose its snapshot.
func TestWorkerLostBetweenRestoreAndRunning(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// The worker is released and unregistered under the running start
	// (DeleteWorker refuses a held one).
	e.node.onStart = func(req nodeapi.StartRequest) error {
		if err := e.st.ReleaseWorker(ctx, req.Worker, req.ActorUID); err != nil {
			return err
		}
		return e.st.DeleteWorker(ctx, req.Worker)
	}
	_, err := e.m.Resume(ctx, key("a"))
	if !errors.Is(err, ErrResumeFailed) {
		t.Fatalf("Resume = %v, want ErrResumeFailed", err)
	}
	a := e.get(t)
	if a.State == store.Running || a.Worker != "" {
		t.Fatalf("actor %s on %q after its worker vanished", a.State, a.Worker)
	}
	if a.State != store.Suspended || !strings.Contains(a.Message, "lost") {
		t.Fatalf("actor %+v", a)
	}
	e.node.onStart = nil
	if a, err := e.m.Resume(ctx, key("a")); err != nil || a.State != store.Running {
		t.Fatalf("resume on the remaining worker: %v %v", a, err)
	}
}

// TestLateFinisherDoesNotOverwrite: someone else changes the actor while a
// restore runs; the resume gives up without writing over the change.
func TestLateFinisherDoesNotOverwrite(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.node.onStart = func(nodeapi.StartRequest) error {
		a, err := e.st.GetActor(ctx, key("a"))
		if err != nil {
			return err
		}
		a.State, a.Worker, a.Message = store.Crashed, "", "set by another workflow"
		_, err = e.st.UpdateActor(ctx, a)
		return err
	}
	if _, err := e.m.Resume(ctx, key("a")); !errors.Is(err, ErrResumeFailed) {
		t.Fatalf("Resume = %v", err)
	}
	if a := e.get(t); a.State != store.Crashed || a.Message != "set by another workflow" {
		t.Fatalf("late finisher overwrote: %+v", a)
	}
	if n := e.claimedWorkers(t); n != 0 {
		t.Fatalf("%d workers still claimed", n)
	}
}

func TestCrashedResumeSaysSo(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.resume(t)
	e.m.WorkerExited(e.get(t).Worker, "a-uid")
	a := e.get(t)
	if a.State != store.Crashed || a.Worker != "" || e.claimedWorkers(t) != 0 {
		t.Fatalf("after the sandbox died: %+v", a)
	}
	a, err := e.m.Resume(ctx, key("a"))
	if err != nil || a.State != store.Running || !strings.Contains(a.Message, "after a crash") {
		t.Fatalf("resume of CRASHED: %+v %v", a, err)
	}
}

// TestPausedOnLostNode: the node holding a paused checkpoint is gone; the
// actor resumes from its last durable snapshot and the message says work
// was lost.
func TestPausedOnLostNode(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.get(t)
	a.State, a.Snapshot, a.PausedSnapshot, a.Node = store.Paused, "a-uid/durable", "a-uid/paused", "gone-node"
	_, err := e.st.UpdateActor(ctx, a)
	must(t, err)
	out, err := e.m.Resume(ctx, key("a"))
	if err != nil {
		t.Fatal(err)
	}
	if e.node.last.Snapshot != "a-uid/durable" || e.node.last.Paused {
		t.Fatalf("restored %q (paused=%v), want the durable snapshot", e.node.last.Snapshot, e.node.last.Paused)
	}
	if !strings.Contains(out.Message, "work since then was lost") || out.PausedSnapshot != "" {
		t.Fatalf("actor %+v", out)
	}
}

func TestPauseThenResumePrefersNode(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.resume(t)
	p, err := e.m.Pause(ctx, key("a"))
	if err != nil || p.State != store.Paused || p.Node != "n1" || p.PausedSnapshot == "" || p.Worker != "" {
		t.Fatalf("pause: %+v %v", p, err)
	}
	e.resume(t)
	if !e.node.last.Paused || e.node.last.Snapshot != p.PausedSnapshot {
		t.Fatalf("resume used %+v, want the paused checkpoint", e.node.last)
	}
	if _, err := e.m.Pause(ctx, key("a")); err != nil {
		t.Fatal(err)
	}
	s, err := e.m.Suspend(ctx, key("a"))
	if err != nil || s.State != store.Suspended || s.Snapshot != "a-uid/uploaded" || s.PausedSnapshot != "" {
		t.Fatalf("suspend of PAUSED: %+v %v", s, err)
	}
}

func TestDeleteNeedsSuspendOrForce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.resume(t)
	if err := e.m.Delete(ctx, key("a"), false); !errors.Is(err, ErrFailedPrecondition) || !strings.Contains(err.Error(), "suspend it first") {
		t.Fatalf("Delete of RUNNING = %v", err)
	}
	if err := e.m.Delete(ctx, key("a"), true); err != nil {
		t.Fatal(err)
	}
	if n := e.claimedWorkers(t); n != 0 {
		t.Fatalf("%d workers claimed after force delete", n)
	}
}

// TestForceDeleteOutlastsActivityReports: an activity report written
// while a force delete stops the actor's sandbox (the router reports a
// running actor's traffic) does not fail the delete with a conflict: the
// cluster suite met "conflict: record changed concurrently" from `ate
// delete actor --force` once.
func TestForceDeleteOutlastsActivityReports(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.resume(t)
	e.node.onStop = func() {
		must(t, e.st.RecordActivity(ctx, []names.Activity{{Actor: key("a"), Last: time.Now().Add(time.Minute)}}))
	}
	if err := e.m.Delete(ctx, key("a"), true); err != nil {
		t.Fatalf("force delete with an activity report during the stop: %v", err)
	}
	if _, err := e.st.GetActor(ctx, key("a")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("actor after the delete: %v, want ErrNotFound", err)
	}
}

// TestGarbageCollection: snapshots nobody points to (a crash between
// commit and pointer move) are deleted by CollectGarbage, unless this
// manager minted their ids (its own workflows may still record them);
// referenced ones stay.
func TestGarbageCollection(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	mk := func(owner, id string) string {
		st, err := e.snaps.Stage(owner, id)
		must(t, err)
		must(t, os.WriteFile(filepath.Join(st.Dir, "checkpoint.img"), []byte("x"), 0o600))
		ref, err := e.snaps.Commit(ctx, st, snapshot.ScopeFull)
		must(t, err)
		return ref
	}
	// A predecessor's ids may read any time: its clock is not ours.
	kept, orphan, mine := mk("a-uid", ""), mk("a-uid", "20990101T000000.000Z-0123456789abcdef"), mk("a-uid", e.m.newSnapshotID())
	leftover, err := e.snaps.Stage("a-uid", "") // crash before commit
	must(t, err)
	a := e.get(t)
	a.Snapshot = kept
	_, err = e.st.UpdateActor(ctx, a)
	must(t, err)
	// Over a shared store (a holder given) other replicas may be staging:
	// staging is left alone. The only API server over its store clears it.
	must(t, e.m.Recover(ctx, "n1"))
	if _, err := os.Stat(leftover.Dir); err != nil {
		t.Fatalf("Recover with a lease holder removed staging other replicas may be writing: %v", err)
	}
	alone := New(e.st, testNodes{n: e.node, live: []string{"n1"}}, e.snaps, "", nil)
	t.Cleanup(alone.Close)
	must(t, alone.Recover(ctx, "n1"))
	if _, err := os.Stat(leftover.Dir); !os.IsNotExist(err) {
		t.Fatalf("staging leftover survived Recover: %v", err)
	}
	must(t, e.m.CollectGarbage(ctx))
	if _, err := e.snaps.Open(ctx, kept); err != nil {
		t.Fatalf("referenced snapshot removed: %v", err)
	}
	if _, err := e.snaps.Open(ctx, orphan); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("orphan snapshot survived: %v", err)
	}
	if _, err := e.snaps.Open(ctx, mine); err != nil {
		t.Fatalf("snapshot this manager minted, not yet recorded, removed: %v", err)
	}
	e.m.ForgetMinted()
	if err := e.m.CollectGarbage(ctx); !errors.Is(err, errMintedForgotten) {
		t.Fatalf("collection once the minted ids are forgotten = %v, want errMintedForgotten", err)
	}
	if _, err := e.snaps.Open(ctx, mine); err != nil {
		t.Fatalf("snapshot this manager minted removed after it forgot them: %v", err)
	}
}

// TestMetadataChangesDoNotAbortWorkflows: the router records activity (a
// write of last_activity) while a suspend checkpoints; the suspend must
// still complete, and the activity must survive it.
func TestMetadataChangesDoNotAbortWorkflows(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.resume(t)
	seen := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	e.node.onCheckpoint = func() {
		a, err := e.st.GetActor(ctx, key("a"))
		if err != nil {
			t.Error(err)
			return
		}
		a.LastActivity = seen
		if _, err := e.st.UpdateActor(ctx, a); err != nil {
			t.Error(err)
		}
	}
	out, err := e.m.Suspend(ctx, key("a"))
	if err != nil {
		t.Fatalf("Suspend with a concurrent activity write: %v", err)
	}
	if out.State != store.Suspended || !out.LastActivity.Equal(seen) || e.claimedWorkers(t) != 0 {
		t.Fatalf("after suspend: %+v", out)
	}
}

// TestPausedMovesOnlyAfterUpload: the paused actor's node has no free
// worker but another node has; the resume uploads the paused checkpoint
// first and restores the uploaded copy there.
func TestPausedMovesOnlyAfterUpload(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	must(t, e.st.PutWorker(ctx, &store.Worker{Name: "other", Node: "n2"}))
	for _, n := range []string{"b", "c"} { // occupy both workers of n1
		must(t, e.st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: n, UID: n + "-uid", Template: "tpl", Lifecycle: store.Lifecycle{State: store.Suspended}}))
		b, err := e.st.GetActor(ctx, key(n))
		must(t, err)
		if _, _, err := e.st.ClaimWorker(ctx, b, "n1"); err != nil {
			t.Fatal(err)
		}
	}
	a := e.get(t)
	a.State, a.PausedSnapshot, a.Node = store.Paused, "a-uid/paused", "n1"
	_, err := e.st.UpdateActor(ctx, a)
	must(t, err)
	// The router records the actor's activity while it starts: the
	// RUNNING write must merge with that, not fail with the paused copy
	// already gone.
	at := time.Now().UTC()
	e.node.onStart = func(nodeapi.StartRequest) error {
		return e.st.RecordActivity(ctx, []names.Activity{{Actor: key("a"), Last: at}})
	}
	out, err := e.m.Resume(ctx, key("a"))
	if err != nil {
		t.Fatal(err)
	}
	if e.node.last.Paused || e.node.last.Snapshot != "a-uid/uploaded" || e.node.last.Worker != "other" {
		t.Fatalf("started %+v, want the uploaded copy on the other node", e.node.last)
	}
	if out.Snapshot != "a-uid/uploaded" || out.PausedSnapshot != "" || out.Worker != "other" {
		t.Fatalf("actor %+v", out)
	}
	if !out.LastActivity.Equal(at) {
		t.Fatalf("LastActivity after resume = %v, want %v (the activity recorded during the start)", out.LastActivity, at)
	}
}

// TestResumePrefersWorkerWithStandby: of two free workers, the resume
// takes the one the node says holds a standby for the template, though
// the other comes first in the store.
func TestResumePrefersWorkerWithStandby(t *testing.T) {
	e := newEnv(t)
	e.node.standbys = []string{"w1"}
	e.resume(t)
	if got := e.get(t).Worker; got != "w1" {
		t.Fatalf("resumed on %s, want w1 (the worker with a standby)", got)
	}
	tpl, err := e.st.GetTemplate(t.Context(), "default", "tpl")
	must(t, err)
	if !proto.Equal(e.node.standbyFor, tpl.Spec) || e.node.standbyDigest != tpl.ImageDigest {
		t.Fatalf("StandbyWorkers asked for %v, %q; want the template's spec and image %q", e.node.standbyFor, e.node.standbyDigest, tpl.ImageDigest)
	}
}

// key is the actor name's key in the default atespace.
func key(name string) names.ActorKey { return names.ActorKey{Atespace: "default", Name: name} }

// TestIdleSuspendRefusedWhileTunnelBusy: with several routers, one may
// find an actor idle that is busy through another; an idle suspend is
// refused while the worker's tunnel has a request open or saw traffic
// within idle.after, and goes ahead once it has been quiet that long. A
// requested suspend is never refused for traffic.
func TestIdleSuspendRefusedWhileTunnelBusy(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	must(t, e.st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "idle", UID: "idle-uid",
		Phase: store.TemplateReady, GoldenSnapshot: "idle-uid/golden", ImageDigest: "sha256:idle",
		Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}},
			Idle: &atev1.IdlePolicy{After: "10s"}}}))
	must(t, e.st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: "b", UID: "b-uid", Template: "idle",
		Lifecycle: store.Lifecycle{State: store.Suspended}}))
	b, err := e.m.Resume(ctx, key("b"))
	must(t, err)
	idle := Why{Reason: store.ReasonIdle}
	for _, tc := range []struct {
		name string
		act  nodeapi.Activity
		ok   bool
	}{
		{"request open", nodeapi.Activity{ActorUID: "b-uid", InFlight: 1, Last: time.Now().Add(-time.Hour)}, false},
		{"traffic 2s ago", nodeapi.Activity{ActorUID: "b-uid", Last: time.Now().Add(-2 * time.Second)}, false},
		{"another incarnation's traffic", nodeapi.Activity{ActorUID: "old-uid", InFlight: 3, Last: time.Now()}, true},
	} {
		e.node.setActivity(b.Worker, tc.act)
		_, err := e.m.PutAway(ctx, key("b"), checkpoint.Suspend, idle)
		if tc.ok {
			if err != nil {
				t.Fatalf("%s: idle suspend = %v, want it done", tc.name, err)
			}
			b, err = e.m.Resume(ctx, key("b"))
			must(t, err)
			continue
		}
		if !errors.Is(err, ErrFailedPrecondition) {
			t.Fatalf("%s: idle suspend = %v, want ErrFailedPrecondition", tc.name, err)
		}
		if got, _ := e.st.GetActor(ctx, key("b")); got.State != store.Running {
			t.Fatalf("%s: refused idle suspend left the actor %s", tc.name, got.State)
		}
	}
	e.node.setActivity(b.Worker, nodeapi.Activity{ActorUID: "b-uid", Last: time.Now().Add(-11 * time.Second)})
	if _, err := e.m.PutAway(ctx, key("b"), checkpoint.Suspend, idle); err != nil {
		t.Fatalf("idle suspend after 11s of quiet with idle.after 10s = %v", err)
	}
	b, err = e.m.Resume(ctx, key("b"))
	must(t, err)
	e.node.setActivity(b.Worker, nodeapi.Activity{ActorUID: "b-uid", InFlight: 1, Last: time.Now()})
	if _, err := e.m.PutAway(ctx, key("b"), checkpoint.Suspend, Why{Reason: store.ReasonRequested}); err != nil {
		t.Fatalf("requested suspend of a busy actor = %v, want it done", err)
	}
}

// TestRecoverLeavesOtherNodesActors: Recover after this node restarted
// crashes the actors that held its workers, not those holding another
// node's (over a shared store, another installation's).
func TestRecoverLeavesOtherNodesActors(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.resume(t) // "a" on a worker of n1
	must(t, e.st.PutWorker(ctx, &store.Worker{Name: "x0", Node: "elsewhere"}))
	must(t, e.st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: "b", UID: "b-uid", Template: "tpl",
		Lifecycle: store.Lifecycle{State: store.Suspended}}))
	b, err := e.st.GetActor(ctx, key("b"))
	must(t, err)
	claimed, _, err := e.st.ClaimWorker(ctx, b, "elsewhere")
	must(t, err)
	claimed.State = store.Running
	_, err = e.st.UpdateActor(ctx, claimed)
	must(t, err)
	must(t, e.m.Recover(ctx, "n1"))
	if a := e.get(t); a.State != store.Crashed {
		t.Fatalf("actor on this node after Recover: %s, want CRASHED", a.State)
	}
	if got, _ := e.st.GetActor(ctx, key("b")); got.State != store.Running || got.Worker != "x0" {
		t.Fatalf("actor on node elsewhere after Recover: %s on %q, want RUNNING on x0", got.State, got.Worker)
	}
}

// TestInterruptedSuspendAdoptsCommittedSnapshot: a suspend whose
// workflow died after the node committed its snapshot but before the
// SUSPENDED write (a replica killed, a store outage past its lease) left
// the actor SUSPENDING with the snapshot pending. The next workflow
// completes the suspend from that snapshot, so what the actor answered
// before it is not rolled back. A pending snapshot never committed is not
// adopted: if the node still runs the sandbox (the first call never
// reached it, or its answer was lost to a partition), the checkpoint is
// asked of it again under the pending id, so nothing the actor answered
// is lost; only if the sandbox is gone does the actor resume from its
// last snapshot.
func TestInterruptedSuspendAdoptsCommittedSnapshot(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name             string
		committed, alive bool
	}{
		{"committed", true, false},
		{"not committed, the sandbox still runs", false, true},
		{"not committed, the sandbox is gone", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			a, pending := e.interruptedSuspend(t, tc.committed)
			e.node.gone.Store(!tc.alive)
			asked := e.node.checkpoints.Load()
			out, err := e.m.Resume(ctx, key("a"))
			must(t, err)
			want := "tpl-uid/golden" // the last snapshot before the interrupted suspend
			switch {
			case tc.committed:
				want = pending
			case tc.alive:
				e.node.mu.Lock()
				id := e.node.lastCheckpoint.ID
				e.node.mu.Unlock()
				if n := e.node.checkpoints.Load() - asked; n != 1 || a.UID+"/"+id != pending {
					t.Fatalf("the node was asked %d checkpoints, the last under id %q; want one, under the pending %q", n, id, pending)
				}
				want = "" // the snapshot the node took now
			}
			got := e.node.last.Snapshot
			if want == "" && (got == "tpl-uid/golden" || !strings.HasPrefix(got, a.UID+"/")) {
				t.Fatalf("resumed from %q: rolled back, though the sandbox still ran and held the actor's state", got)
			}
			if want != "" && got != want {
				t.Fatalf("resumed from %q, want %q", got, want)
			}
			if out.State != store.Running || out.PendingSnapshot != "" {
				t.Fatalf("after the resume: state %s, pending %q", out.State, out.PendingSnapshot)
			}
			if n := e.claimedWorkers(t); n != 1 {
				t.Fatalf("%d workers claimed, want the resumed actor's one", n)
			}
		})
	}
}

// TestInterruptedPauseFinishedOnItsNode: a pause whose call to the node
// failed without an answer left the actor PAUSING. The next workflow
// asks the node for the pause again while it still runs the sandbox,
// and the actor ends PAUSED there, not CRASHED at an older snapshot; if
// the node is not heard, the actor stays PAUSING.
func TestInterruptedPauseFinishedOnItsNode(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.resume(t)
	a := e.get(t)
	a.State = store.Pausing
	_, err := e.st.UpdateActor(ctx, a)
	must(t, err)
	e.node.unreachable.Store(true)
	if _, err := e.m.Pause(ctx, key("a")); !errors.Is(err, ErrNodeUnavailable) {
		t.Fatalf("pause with the node not answering = %v, want ErrNodeUnavailable", err)
	}
	if got := e.get(t); got.State != store.Pausing || got.Worker != a.Worker {
		t.Fatalf("after the unanswered pause: %s on %q, want PAUSING on %s", got.State, got.Worker, a.Worker)
	}
	e.node.unreachable.Store(false)
	out, err := e.m.Pause(ctx, key("a"))
	must(t, err)
	if out.State != store.Paused || out.Node != "n1" || out.PausedSnapshot == "" || out.Worker != "" {
		t.Fatalf("after the interrupted pause was asked again: %s on node %q, paused %q, worker %q; want PAUSED on n1",
			out.State, out.Node, out.PausedSnapshot, out.Worker)
	}
}

// TestInterruptedPauseAdoptsItsCheckpoint: a pause whose call to the
// node went unanswered leaves the actor PAUSING with the checkpoint's id
// recorded. The next workflow asks the node again under that id (the
// node answers a finished pause with the checkpoint it committed), and
// the actor is PAUSED at exactly that checkpoint: a pause that finished
// on the node with its answer lost is not rolled back.
func TestInterruptedPauseAdoptsItsCheckpoint(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	a := e.interruptedPause(t)
	out, err := e.m.Pause(ctx, key("a"))
	must(t, err)
	if got := e.node.lastCheckpoint.ID; a.UID+"/"+got != a.PendingSnapshot {
		t.Fatalf("the node was asked again under id %q, want the recorded %s", got, a.PendingSnapshot)
	}
	if out.State != store.Paused || out.PausedSnapshot != a.PendingSnapshot || out.PendingSnapshot != "" {
		t.Fatalf("after the interrupted pause was asked again: %s at %q (pending %q), want PAUSED at %s",
			out.State, out.PausedSnapshot, out.PendingSnapshot, a.PendingSnapshot)
	}
}

// TestInterruptedUploadKeepsThePause: a PAUSED actor's upload (PAUSED →
// SUSPENDING → SUSPENDED) whose workflow died before its last write is
// settled by the next one: SUSPENDED at the durable copy if that was
// committed, else PAUSED again at its checkpoint on the node, from which
// the next resume restores. Never CRASHED at the older durable snapshot,
// which would lose what the actor answered before its pause.
func TestInterruptedUploadKeepsThePause(t *testing.T) {
	for _, committed := range []bool{false, true} {
		t.Run(fmt.Sprintf("committed=%v", committed), func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			e.resume(t)
			paused, err := e.m.Pause(ctx, key("a"))
			must(t, err)
			pending := e.pendingSnapshot(t, paused.UID, committed)
			ing := *paused
			ing.State, ing.PendingSnapshot = store.Suspending, pending
			_, err = e.st.UpdateActor(ctx, &ing)
			must(t, err)

			var started nodeapi.StartRequest
			e.node.onStart = func(req nodeapi.StartRequest) error { started = req; return nil }
			e.resume(t)
			want := nodeapi.StartRequest{Snapshot: paused.PausedSnapshot, Paused: true}
			if committed {
				want = nodeapi.StartRequest{Snapshot: pending}
			}
			if started.Snapshot != want.Snapshot || started.Paused != want.Paused {
				t.Fatalf("resumed from %q (paused %v), want %q (paused %v)", started.Snapshot, started.Paused, want.Snapshot, want.Paused)
			}
			if got := e.get(t); got.State != store.Running || got.PendingSnapshot != "" {
				t.Fatalf("after the resume: %s, pending %q; want RUNNING, nothing pending", got.State, got.PendingSnapshot)
			}
		})
	}
}

// interruptedPause resumes the actor and pauses it while the node does
// not answer, as a pause whose call or answer was lost: the actor is
// left PAUSING on its worker with its checkpoint's id recorded. The node
// answers again afterwards. It returns that record.
func (e *env) interruptedPause(t *testing.T) *store.Actor {
	t.Helper()
	e.resume(t)
	e.node.unreachable.Store(true)
	if _, err := e.m.Pause(context.Background(), key("a")); !errors.Is(err, ErrNodeUnavailable) {
		t.Fatalf("pause with the node not answering = %v, want ErrNodeUnavailable", err)
	}
	e.node.unreachable.Store(false)
	a := e.get(t)
	if a.State != store.Pausing || !strings.HasPrefix(a.PendingSnapshot, a.UID+"/") {
		t.Fatalf("after the unanswered pause: %s, pending %q; want PAUSING with its checkpoint's id", a.State, a.PendingSnapshot)
	}
	return a
}

// interruptedSuspend resumes the actor and then leaves its record as a
// suspend's workflow that died does: SUSPENDING on its worker with a
// pending snapshot, committed by the node or not. It returns the record
// before the suspend began and the pending snapshot.
func (e *env) interruptedSuspend(t *testing.T, committed bool) (*store.Actor, string) {
	t.Helper()
	ctx := context.Background()
	e.resume(t)
	a := e.get(t)
	pending := e.pendingSnapshot(t, a.UID, committed)
	ing := *a
	ing.State, ing.PendingSnapshot = store.Suspending, pending
	_, err := e.st.UpdateActor(ctx, &ing)
	must(t, err)
	return a, pending
}

// pendingSnapshot names a new durable snapshot of uid, as a workflow
// records the one it is having written; committed, it is written too,
// and the name carries its digest.
func (e *env) pendingSnapshot(t *testing.T, uid string, committed bool) string {
	t.Helper()
	if !committed {
		return uid + "/" + snapshot.NewID()
	}
	st, err := e.snaps.Stage(uid, "")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(st.Dir, "checkpoint.img"), []byte("x"), 0o600))
	ref, err := e.snaps.Commit(context.Background(), st, snapshot.ScopeFull)
	must(t, err)
	return ref
}

// stallingStore fails lease renewals and heartbeats while stalled is
// set, as a process that stands still renews nothing.
type stallingStore struct {
	store.Store
	stalled atomic.Bool
}

func (s *stallingStore) AcquireLease(ctx context.Context, key, holder string, ttl time.Duration) (*store.Lease, error) {
	if s.stalled.Load() && key == store.HolderKey(holder) {
		return nil, store.ErrUnavailable
	}
	return s.Store.AcquireLease(ctx, key, holder, ttl)
}

func (s *stallingStore) RenewLease(ctx context.Context, key, holder string, token int64, ttl time.Duration) (*store.Lease, error) {
	if s.stalled.Load() {
		return nil, store.ErrUnavailable
	}
	return s.Store.RenewLease(ctx, key, holder, token, ttl)
}

// TestFencedWorkflowLeavesTheNodeAlone: a resume whose lease lapsed
// while the node restored (the replica stood still) and was taken over
// by another holder has its RUNNING write refused; it must not then stop
// the sandbox on the node, which may be the new holder's, for the same
// actor on the same worker.
func TestFencedWorkflowLeavesTheNodeAlone(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	st := &stallingStore{Store: e.st}
	m := New(st, testNodes{n: e.node, live: []string{"n1"}}, e.snaps, "stalled-replica", nil)
	t.Cleanup(m.Close)
	m.SetLeases(LeaseConfig{Duration: 100 * time.Millisecond})
	e.node.onStart = func(nodeapi.StartRequest) error {
		st.stalled.Store(true)
		defer st.stalled.Store(false)
		testwait.Until(t, "the stalled lease taken over", func() bool {
			_, err := e.st.AcquireLease(ctx, "actor/default/a", "other-replica", time.Hour)
			return err == nil
		})
		return nil
	}
	_, err := m.Resume(ctx, key("a"))
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("resume whose lease was taken over = %v, want ErrFenced", err)
	}
	if n := e.node.stops.Load(); n != 0 {
		t.Fatalf("the fenced workflow stopped %d sandboxes on the node; it must leave them to the lease's new holder", n)
	}
}

// TestStandingStillReplicaIsTakenOver: a replica that stands still in
// the middle of a resume, with an hour left on the actor's lease, loses
// the actor to another replica once its heartbeat lapses, not when the
// lease expires; when it goes on, its write is refused (fenced) and the
// record keeps the other replica's result.
func TestStandingStillReplicaIsTakenOver(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	st := &stallingStore{Store: e.st}
	nodes := testNodes{n: e.node, live: []string{"n1"}}
	stalled := New(st, nodes, e.snaps, "stalled-replica", nil)
	t.Cleanup(stalled.Close)
	other := New(e.st, nodes, e.snaps, "other-replica", nil)
	t.Cleanup(other.Close)
	for _, m := range []*Manager{stalled, other} {
		m.SetLeases(LeaseConfig{Duration: time.Hour})
	}
	began, goOn := make(chan struct{}), make(chan struct{})
	var started atomic.Bool
	e.node.onStart = func(nodeapi.StartRequest) error {
		if !started.Swap(true) { // the stalled replica's start
			st.stalled.Store(true)
			close(began)
			<-goOn
			st.stalled.Store(false)
		}
		return nil
	}
	stalledResume := make(chan error, 1)
	go func() {
		_, err := stalled.Resume(ctx, key("a"))
		stalledResume <- err
	}()
	<-began
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	won, err := other.Resume(rctx, key("a"))
	if err != nil {
		t.Fatalf("resume on another replica while the first stands still: %v", err)
	}
	close(goOn)
	if err := <-stalledResume; !errors.Is(err, store.ErrFenced) {
		t.Fatalf("the stalled replica's resume = %v, want ErrFenced", err)
	}
	if a := e.get(t); a.State != store.Running || a.Worker != won.Worker || a.Resumes != won.Resumes {
		t.Fatalf("record after the stalled replica went on: %s on %q (%d resumes), want the other replica's RUNNING on %q (%d)",
			a.State, a.Worker, a.Resumes, won.Worker, won.Resumes)
	}
}

// TestNodeCallsCarryTheLeaseToken: each start, checkpoint and stop a
// workflow asks of a node carries the token of the actor's lease it
// holds, which the node keeps per actor to refuse a late call of a
// workflow taken over since (node.fenceTokens); each workflow's token
// is newer than the last one's.
func TestNodeCallsCarryTheLeaseToken(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.resume(t)
	// The record names the token the sandbox was started under, which
	// routers send the tunnel (Actor.assignment).
	e.node.mu.Lock()
	started := e.node.fences[0]
	e.node.mu.Unlock()
	if a := e.get(t); a.Assignment == 0 || started != fmt.Sprint("start ", a.Assignment) {
		t.Fatalf("RUNNING record's assignment %d; the node's start carried %q", a.Assignment, started)
	}
	_, err := e.m.Suspend(ctx, key("a"))
	must(t, err)
	e.resume(t)
	// A stop: a forced delete of the running actor.
	must(t, e.m.Delete(ctx, key("a"), true))

	e.node.mu.Lock()
	calls := slices.Clone(e.node.fences)
	e.node.mu.Unlock()
	var last int64
	for i, c := range calls {
		var op string
		var token int64
		if _, err := fmt.Sscan(c, &op, &token); err != nil {
			t.Fatal(err)
		}
		if token <= 0 || token < last || (i > 0 && op == "start" && token == last) {
			t.Fatalf("node calls carried %v; want a token on each, one newer per workflow", calls)
		}
		last = token
	}
	if len(calls) < 4 {
		t.Fatalf("node calls %v; want start, checkpoint, start, stop", calls)
	}
}

// TestTakeoverTellsTheNode: a workflow that takes an actor's lease from
// a holder that never released it tells the actor's node the new token
// before anything else, even when it then asks the node nothing (a
// resume that finds the actor RUNNING), so the old holder's late stop or
// checkpoint is refused there.
func TestTakeoverTellsTheNode(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.resume(t)
	// A replica took the lease and died with it; it has run out.
	dead, err := e.st.AcquireLease(ctx, "actor/default/a", "dead-replica", time.Nanosecond)
	must(t, err)
	e.node.mu.Lock()
	e.node.fences = nil
	e.node.mu.Unlock()
	e.resume(t) // RUNNING already: nothing to start
	e.node.mu.Lock()
	calls := slices.Clone(e.node.fences)
	e.node.mu.Unlock()
	var token int64
	if len(calls) != 1 || !strings.HasPrefix(calls[0], "fence ") {
		t.Fatalf("node calls after the takeover %v, want one fence", calls)
	}
	if _, err := fmt.Sscanf(calls[0], "fence %d", &token); err != nil || token <= dead.Token {
		t.Fatalf("fence token %d (%v), want one above the dead holder's %d", token, err, dead.Token)
	}
	// A lease its holder gave back is taken without a word to the node.
	e.resume(t)
	e.node.mu.Lock()
	n := len(e.node.fences)
	e.node.mu.Unlock()
	if n != 1 {
		t.Fatalf("node told again after a released lease was taken: %v", e.node.fences)
	}
}

// TestNodeFencedStopWritesNothing: a stop the node refuses as fenced (a
// newer workflow acted on the actor there) ends the workflow without a
// write: it must not record the actor CRASHED and free its worker while
// the sandbox, the newer workflow's, runs on.
func TestNodeFencedStopWritesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.resume(t)
	before := e.get(t)
	e.node.stopErr = fmt.Errorf("%w: actor a-uid was acted on under a newer token", nodeapi.ErrFenced)
	if err := e.m.Delete(ctx, key("a"), true); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("forced delete refused by the node = %v, want ErrFenced", err)
	}
	if a := e.get(t); a.State != store.Running || a.Worker != before.Worker {
		t.Fatalf("after the refused stop: %s on %q, want RUNNING on %q as before", a.State, a.Worker, before.Worker)
	}
}

// TestTakeOverOnlyOnceBackForASilence: a replica takes leases over from
// silent ones only once its own beats have gone through for a whole
// silence; right after a store outage every heartbeat has lapsed, and
// the others have not had the time to beat again.
func TestTakeOverOnlyOnceBackForASilence(t *testing.T) {
	m := &Manager{beat: beatState{first: make(chan struct{})}}
	now := time.Now()
	for i, s := range []struct {
		sent time.Time
		ok   bool
		want bool
	}{
		{now.Add(-3 * holderSilence), true, true}, // beating since three silences ago
		{now.Add(-2 * holderSilence), true, true},
		{now.Add(-holderSilence / 2), false, false}, // the store went away
		{now.Add(-holderSilence / 5), true, false},  // back, but only just
	} {
		m.beat.record(s.sent, s.ok)
		if got := m.mayTakeOver(); got != s.want {
			t.Errorf("step %d: mayTakeOver %v, want %v", i, got, s.want)
		}
	}
}

func TestForNode(t *testing.T) {
	a := &store.Actor{Atespace: "default", Name: "a"}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want int64
	}{
		{"no lease", ctx, 0},
		{"the actor's lease", store.WithFence(ctx, store.Fence{Key: "actor/default/a", Holder: "r1", Token: 12}), 12},
		// An eviction's call about its victim, made from the lease of
		// the actor it makes room for.
		{"another actor's lease", store.WithFence(ctx, store.Fence{Key: "actor/default/b", Holder: "r1", Token: 13}), 0},
	} {
		if got := nodeapi.FenceFrom(forNode(tc.ctx, a)); got != tc.want {
			t.Errorf("%s: token %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestFencedCheckpointKeepsWhatItWrote: a pause (or an upload) whose
// last write is refused because its lease was taken over meanwhile
// leaves the checkpoint it wrote in place: the record names it as
// pending, and the lease's new holder adopts it (finishInterrupted,
// finishUpload), perhaps already. Deleting it would leave that one's
// record naming nothing.
func TestFencedCheckpointKeepsWhatItWrote(t *testing.T) {
	ctx := context.Background()
	for _, upload := range []bool{false, true} {
		t.Run(fmt.Sprintf("upload=%v", upload), func(t *testing.T) {
			e := newEnv(t)
			e.resume(t)
			st := &stallingStore{Store: e.st}
			snaps := &deleteRecorder{Store: e.snaps}
			m := New(st, testNodes{n: e.node, live: []string{"n1"}}, snaps, "stalled-replica", nil)
			t.Cleanup(m.Close)
			m.SetLeases(LeaseConfig{Duration: 100 * time.Millisecond})
			takeOver := func() {
				st.stalled.Store(true)
				defer st.stalled.Store(false)
				testwait.Until(t, "the stalled lease taken over", func() bool {
					_, err := e.st.AcquireLease(ctx, "actor/default/a", "other-replica", time.Hour)
					return err == nil
				})
			}
			var err error
			if upload {
				_, err = e.m.Pause(ctx, key("a"))
				must(t, err)
				e.node.onUpload = takeOver
				_, err = m.Suspend(ctx, key("a"))
			} else {
				e.node.onCheckpoint = takeOver
				_, err = m.Pause(ctx, key("a"))
			}
			if !errors.Is(err, store.ErrFenced) {
				t.Fatalf("a checkpoint whose lease was taken over = %v, want ErrFenced", err)
			}
			if n := e.node.deletedPaused.Load(); n != 0 {
				t.Fatalf("the fenced workflow deleted %d paused checkpoints", n)
			}
			if d := snaps.deleted.Load(); d != 0 {
				t.Fatalf("the fenced workflow deleted %d durable snapshots", d)
			}
			if a := e.get(t); a.PendingSnapshot == "" {
				t.Fatalf("after the fenced write: %s with nothing pending, want the checkpoint named for the next workflow", a.State)
			}
		})
	}
}

// deleteRecorder is a snapshot store that counts deletions.
type deleteRecorder struct {
	snapshot.Store
	deleted atomic.Int64
}

func (d *deleteRecorder) Delete(ctx context.Context, ref string) error {
	d.deleted.Add(1)
	return d.Store.Delete(ctx, ref)
}

// TestClaimsNotHostedAsksTheNode: a node's hello that shows a claimed
// worker not hosting its actor crashes the actor only if the node,
// asked then, does not host it there: a hello older than the actor's
// start (built while another replica started it, or held up on the
// way) leaves it running, whatever the clocks say, and so does a node
// that cannot be asked.
func TestClaimsNotHostedAsksTheNode(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		hostsItNow  bool
		unreachable bool
		wantState   store.ActorState
	}{
		{"the node runs it nowhere", false, false, store.Crashed},
		{"the node runs it there now: the hello was older", true, false, store.Running},
		{"the node cannot be asked", false, true, store.Running},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.resume(t)
			a := e.get(t)
			w, err := e.st.GetWorker(ctx, a.Worker)
			must(t, err)
			if tc.hostsItNow {
				e.node.mu.Lock()
				e.node.hosted = map[string]string{w.Name: a.UID}
				e.node.mu.Unlock()
			}
			e.node.unreachable.Store(tc.unreachable)
			must(t, e.m.ClaimsNotHosted(ctx, "n1", []*store.Worker{w}, "test"))
			if got := e.get(t); got.State != tc.wantState {
				t.Fatalf("after ClaimsNotHosted: %s, want %s", got.State, tc.wantState)
			}
		})
	}
}

// TestClaimsNotHostedFinishesAnInterruptedPause: a pause that ran on its
// node but whose answer was lost leaves the actor PAUSING on an empty
// worker, and the node's next hello shows that worker empty. The actor
// is not rolled back to its last durable snapshot (losing what it
// answered since) but settled as the next workflow would: the node is
// asked for the pause again under its id and answers with the
// checkpoint it committed, which the actor is then PAUSED at. A node
// that answers the worker empty and nothing committed (the sandbox died
// before the pause ran) gets it CRASHED, as before.
func TestClaimsNotHostedFinishesAnInterruptedPause(t *testing.T) {
	for _, tc := range []struct {
		name string
		// gone: the node answers the repeated pause ErrStale.
		gone bool
		want store.ActorState
	}{
		{"the node committed the pause", false, store.Paused},
		{"the sandbox died before the pause ran", true, store.Crashed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			a := e.interruptedPause(t)
			e.node.gone.Store(tc.gone)
			w, err := e.st.GetWorker(ctx, a.Worker)
			must(t, err)
			must(t, e.m.ClaimsNotHosted(ctx, "n1", []*store.Worker{w}, "test: the node no longer runs it"))
			out := e.get(t)
			if out.State != tc.want {
				t.Fatalf("after a hello showed the pausing actor's worker empty: %s at %q (%s), want %s", out.State, out.PausedSnapshot, out.Message, tc.want)
			}
			if tc.want == store.Paused && out.PausedSnapshot != a.PendingSnapshot {
				t.Fatalf("PAUSED at %q, want the pause's own checkpoint %s", out.PausedSnapshot, a.PendingSnapshot)
			}
			if got := e.node.lastCheckpoint.ID; a.UID+"/"+got != a.PendingSnapshot && !tc.gone {
				t.Fatalf("the node was asked again under id %q, want the recorded %s", got, a.PendingSnapshot)
			}
		})
	}
}

// unsureSnapshots cannot tell whether a snapshot was committed.
type unsureSnapshots struct{ *snapshot.Local }

func (unsureSnapshots) Committed(context.Context, string) (string, error) {
	return "", errors.New("snapshot store unreachable")
}

// TestInterruptedSuspendWaitsWhenUnsure: when the snapshot store cannot
// tell whether an interrupted suspend's snapshot was committed, the actor
// is neither rolled back (that could lose what it answered) nor adopted:
// it stays SUSPENDING with its pending snapshot for a later workflow.
func TestInterruptedSuspendWaitsWhenUnsure(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, pending := e.interruptedSuspend(t, false)
	m := New(e.st, testNodes{n: e.node, live: []string{"n1"}}, unsureSnapshots{e.snaps}, "test", nil)
	t.Cleanup(m.Close)
	if _, err := m.Resume(ctx, key("a")); err == nil {
		t.Fatal("resume succeeded though the interrupted suspend could be neither adopted nor rolled back")
	}
	if got := e.get(t); got.State != store.Suspending || got.PendingSnapshot != pending {
		t.Fatalf("actor after the unsure resume: %s, pending %q; want SUSPENDING with %q", got.State, got.PendingSnapshot, pending)
	}
	if n, c := e.node.stops.Load(), e.node.checkpoints.Load(); n != 0 || c != 0 {
		t.Fatalf("the unsure resume stopped %d sandboxes and asked %d checkpoints; the sandbox may hold the only copy, want it left alone", n, c)
	}
}

// TestInterruptedSuspendUnclearAnswer: the node answers the checkpoint
// asked again with an error that does not say the sandbox is gone (not
// ErrStale): the actor stays SUSPENDING on its worker with its pending
// snapshot and its sandbox is not stopped; once the node says the worker
// is empty, it is rolled back.
func TestInterruptedSuspendUnclearAnswer(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, pending := e.interruptedSuspend(t, false)
	e.node.checkpointErr = errors.New("internal error")
	if _, err := e.m.Resume(ctx, key("a")); !errors.Is(err, ErrNodeUnavailable) {
		t.Fatalf("resume with an unclear answer from the node = %v, want ErrNodeUnavailable", err)
	}
	if got := e.get(t); got.State != store.Suspending || got.Worker != a.Worker || got.PendingSnapshot != pending || e.node.stops.Load() != 0 {
		t.Fatalf("after an unclear answer: %s on %q, pending %q, %d stops; want SUSPENDING on %s, its sandbox left alone",
			got.State, got.Worker, got.PendingSnapshot, e.node.stops.Load(), a.Worker)
	}
	e.node.checkpointErr = nil
	e.node.gone.Store(true)
	if _, err := e.m.Resume(ctx, key("a")); err != nil {
		t.Fatal(err)
	}
	if from := e.node.last.Snapshot; from != "tpl-uid/golden" {
		t.Fatalf("resumed from %q once the sandbox was gone, want the last snapshot", from)
	}
}

// TestIdleSuspendListeningStreams: an open listening stream keeps an
// idle suspend refused by default, as any open request does, and is
// ignored with streams.idle: ignore; other open requests still count.
func TestIdleSuspendListeningStreams(t *testing.T) {
	for _, tc := range []struct {
		name    string
		streams *atev1.StreamPolicy
		act     nodeapi.Activity
		ok      bool
	}{
		{"default counts the stream", nil, nodeapi.Activity{InFlight: 1, Streams: 1, Listeners: 1}, false},
		{"ignore", &atev1.StreamPolicy{Idle: "ignore"}, nodeapi.Activity{InFlight: 1, Streams: 1, Listeners: 1}, true},
		{"ignore leaves other requests", &atev1.StreamPolicy{Idle: "ignore"}, nodeapi.Activity{InFlight: 2, Streams: 1, Listeners: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			must(t, e.st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "idle", UID: "idle-uid",
				Phase: store.TemplateReady, GoldenSnapshot: "idle-uid/golden", ImageDigest: "sha256:idle",
				Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}},
					Idle: &atev1.IdlePolicy{After: "10s"}, Streams: tc.streams}}))
			must(t, e.st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: "b", UID: "b-uid", Template: "idle",
				Lifecycle: store.Lifecycle{State: store.Suspended}}))
			b, err := e.m.Resume(ctx, key("b"))
			must(t, err)
			act := tc.act
			act.ActorUID, act.Last = "b-uid", time.Now().Add(-time.Hour)
			e.node.setActivity(b.Worker, act)
			_, err = e.m.PutAway(ctx, key("b"), checkpoint.Suspend, Why{Reason: store.ReasonIdle})
			if tc.ok && err != nil {
				t.Fatalf("idle suspend = %v, want it done", err)
			}
			if !tc.ok && !errors.Is(err, ErrFailedPrecondition) {
				t.Fatalf("idle suspend = %v, want ErrFailedPrecondition", err)
			}
		})
	}
}

// TestWorkersLostCrashesAClaimMadeSinceTheListing: a lost node's worker
// listed free is claimed by a resume before WorkersLost reaches it (the
// crashes before it wait for actor leases). The actor that claimed it is
// crashed before the worker goes, not left RUNNING on no worker.
func TestWorkersLostCrashesAClaimMadeSinceTheListing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	listed, err := e.st.ListWorkers(ctx)
	must(t, err)
	e.resume(t)
	a := e.get(t)
	var stale []*store.Worker
	for _, w := range listed {
		if w.Name == a.Worker {
			stale = append(stale, w)
		}
	}
	if len(stale) != 1 || !stale[0].Free() {
		t.Fatalf("listing before the claim: %+v", stale)
	}
	must(t, e.m.WorkersLost(ctx, stale, "node n1 lost"))
	if got := e.get(t); got.State != store.Crashed || got.Worker != "" {
		t.Fatalf("actor %s on %q after its worker was lost", got.State, got.Worker)
	}
	if _, err := e.st.GetWorker(ctx, a.Worker); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("lost worker %s: %v, want deleted", a.Worker, err)
	}
}

// TestResumePlacesElsewhereWhenNodeNotServing: a node whose lease ran
// out refuses starts (nodeapi.ErrNotServing; nothing started). The
// resume gives its worker back and lands on another node, answering
// the caller as any resume; the refusing node's worker is free again,
// and the next resume does not try it while it refuses. Before, the
// refusal failed the resume (and a node that did not refuse started a
// sandbox that could only answer 421 until its lease came back).
func TestResumePlacesElsewhereWhenNodeNotServing(t *testing.T) {
	e := newEnv(t)
	e.m.notServingFor = time.Hour // passed over for the whole test
	ctx := context.Background()
	must(t, e.st.PutWorker(ctx, &store.Worker{Name: "w2", Node: "n2"}))
	var refused atomic.Int64
	e.node.onStart = func(req nodeapi.StartRequest) error {
		if req.Worker != "w2" {
			refused.Add(1)
			return fmt.Errorf("%w: node n1 cannot start actor on worker %s", nodeapi.ErrNotServing, req.Worker)
		}
		return nil
	}
	a, err := e.m.Resume(ctx, key("a"))
	if err != nil {
		t.Fatalf("resume with n1 not serving: %v", err)
	}
	if a.State != store.Running || a.Worker != "w2" {
		t.Fatalf("actor %s on %q, want RUNNING on n2's w2", a.State, a.Worker)
	}
	if refused.Load() != 1 {
		t.Errorf("n1 was asked to start %d times, want once", refused.Load())
	}
	for _, w := range []string{"w0", "w1"} {
		got, err := e.st.GetWorker(ctx, w)
		must(t, err)
		if !got.Free() {
			t.Errorf("n1's worker %s is held by %s after the refused start, want free", w, got.ActorUID)
		}
	}

	// A second actor, placed while n1 still refuses: n2 is full, so it
	// waits rather than being sent to n1 again at once.
	b := &store.Actor{Atespace: "default", Name: "b", UID: "b-uid", Template: "tpl", Lifecycle: store.Lifecycle{State: store.Suspended}}
	must(t, e.st.CreateActor(ctx, b))
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // how long b waits
	defer cancel()
	if _, err := e.m.Resume(rctx, key("b")); !errors.Is(err, ErrNoCapacity) {
		t.Errorf("resume of b while n1 refuses and n2 is full: %v, want ErrNoCapacity after waiting", err)
	}
	if refused.Load() != 1 {
		t.Errorf("n1 was asked to start %d times while it refused, want no more", refused.Load())
	}
}

// TestRevertDropsThePendingSnapshot: reverting an actor left SUSPENDING
// discards its interrupted suspend's snapshot with the rest: the record
// names no pending snapshot any more (orphan collection would keep it
// forever), and the snapshot is deleted.
func TestRevertDropsThePendingSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, pending := e.interruptedSuspend(t, true)
	out, err := e.m.Revert(ctx, key("a"))
	must(t, err)
	if out.State != store.Suspended || out.PendingSnapshot != "" || out.Snapshot != a.Snapshot {
		t.Fatalf("after revert: %s at %q, pending %q; want SUSPENDED at %q, none pending", out.State, out.Snapshot, out.PendingSnapshot, a.Snapshot)
	}
	if _, err := e.snaps.Open(ctx, pending); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("the interrupted suspend's snapshot after revert: %v, want deleted", err)
	}
}
