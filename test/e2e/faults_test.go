package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/sandbox/gvisor"
	"substrate.dev/ate/internal/snapshot"
)

// faultyRunsc writes a runsc wrapper that injects faults on demand: while
// the file <dir>/kill-restore exists, every restore is killed 0.2 s in
// (SIGKILL, as an OOM killer would; a node retries a restore into a
// standby once, so one kill would be absorbed); when <dir>/slow-checkpoint
// exists, the next checkpoint starts 3 s late (a window to kill the node
// agent in) and the trigger is consumed. It returns the wrapper and dir.
func faultyRunsc(t *testing.T) (wrapper, dir string) {
	t.Helper()
	dir = t.TempDir()
	wrapper = filepath.Join(dir, "runsc")
	script := fmt.Sprintf(`#!/bin/sh
real=%q
dir=%q
case " $* " in
*" restore "*)
	if [ -e "$dir/kill-restore" ]; then
		"$real" "$@" & pid=$!
		sleep 0.2
		kill -9 $pid
		exit 137
	fi ;;
*" checkpoint "*)
	if rm "$dir/slow-checkpoint" 2>/dev/null; then sleep 3; fi ;;
esac
exec "$real" "$@"
`, gvisor.DefaultRunscPath(), dir)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, dir
}

func trigger(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// busyWorkers lists the workers that are not FREE, as "name phase".
func (in *installation) busyWorkers() []string {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, err := in.client.ListWorkers(ctx, &atev1.ListWorkersRequest{})
	if err != nil {
		in.t.Fatal(err)
	}
	var busy []string
	for _, w := range ws.GetWorkers() {
		if w.GetPhase() != atev1.Worker_FREE {
			busy = append(busy, w.GetName()+" "+w.GetPhase().String())
		}
	}
	return busy
}

// TestRestoreKilled: runsc is killed in the middle of a restore; the
// request gets a clear 5xx, the actor is not left RESUMING, the worker is
// free, and the next request resumes it with its memory.
func TestRestoreKilled(t *testing.T) {
	wrapper, dir := faultyRunsc(t)
	in := startUp(t, 2, "--demo", "--runsc", wrapper)
	in.mustCount("default/counter-1", 1)
	in.ate("suspend", "actor", "counter-1")
	trigger(t, dir, "kill-restore")
	code, body, _, err := in.request(http.MethodGet, "default/counter-1", "/", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "kill-restore")); err != nil {
		t.Fatal(err)
	}
	if code < 500 || code == http.StatusInternalServerError || !strings.Contains(body, "could not be resumed") {
		t.Fatalf("request during a killed restore = %d %q", code, body)
	}
	in.wantState("counter-1", atev1.ActorState_SUSPENDED)
	if busy := in.busyWorkers(); len(busy) > 0 {
		t.Fatalf("workers still claimed after the killed restore: %v", busy)
	}
	in.mustCount("default/counter-1", 2)
}

// TestNodeAgentKilledDuringSuspend: `ate up` is SIGKILLed while a suspend
// is checkpointing. After a restart the actor is in a consistent,
// resumable state, no sandbox of the old process survives, and no
// unreferenced snapshot directory remains.
func TestNodeAgentKilledDuringSuspend(t *testing.T) {
	wrapper, dir := faultyRunsc(t)
	dataDir := t.TempDir()
	in := startUpIn(t, dataDir, 2, "--demo", "--runsc", wrapper)
	in.mustCount("default/counter-1", 1)
	in.ate("suspend", "actor", "counter-1")
	in.mustCount("default/counter-1", 2) // snapshot at count=1 is the last good one
	trigger(t, dir, "slow-checkpoint")
	go func() { _, _ = in.ateErr("suspend", "actor", "counter-1") }()
	staging := filepath.Join(dataDir, "snapshots", ".staging")
	waitFor(t, "the checkpoint to start staging", 30*time.Second, func() bool {
		entries, _ := os.ReadDir(staging)
		return len(entries) > 0
	})
	in.kill()

	in2 := startUpIn(t, dataDir, 2, "--runsc", wrapper)
	a := in2.actor("counter-1")
	if a.GetState() != atev1.ActorState_CRASHED && a.GetState() != atev1.ActorState_SUSPENDED {
		t.Fatalf("after restart the actor is %s (%s)", a.GetState(), a.GetMessage())
	}
	if busy := in2.busyWorkers(); a.GetWorker() != "" || len(busy) > 0 {
		t.Fatalf("after restart a worker is still held (actor on %q, not FREE: %v)", a.GetWorker(), busy)
	}
	// Only snapshots something points to remain, once the garbage
	// collection that runs while the API serves is through.
	tpl, err := in2.client.GetActorTemplate(context.Background(), &atev1.GetActorTemplateRequest{Atespace: "default", Name: "counter"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{snapshot.Bare(a.GetSnapshot()): true, snapshot.Bare(tpl.GetStatus().GetGoldenSnapshot()): true}
	var stray []string
	defer func() {
		if t.Failed() && len(stray) > 0 {
			t.Logf("snapshots still there that nothing points to: %v", stray)
		}
	}()
	waitFor(t, "unreferenced snapshots to be collected", 30*time.Second, func() bool {
		stray = nil
		dirs, _ := filepath.Glob(filepath.Join(dataDir, "snapshots", "*", "*"))
		for _, d := range dirs {
			rel, _ := filepath.Rel(filepath.Join(dataDir, "snapshots"), d)
			if !want[rel] {
				stray = append(stray, rel)
			}
		}
		return len(stray) == 0
	})
	if entries, _ := os.ReadDir(staging); len(entries) > 0 {
		t.Errorf("staging leftovers survived the restart: %v", entries)
	}
	// Resumable from the last good snapshot (count=1 there).
	in2.mustCount("default/counter-1", 2)
}

// TestSandboxDiesOnItsOwn: the actor's sandbox is killed behind the node
// agent's back; within seconds the actor is CRASHED with its worker
// free, and the next request resumes it from its last snapshot.
func TestSandboxDiesOnItsOwn(t *testing.T) {
	in := startUp(t, 2, "--demo")
	in.mustCount("default/counter-1", 1)
	in.ate("suspend", "actor", "counter-1")
	in.mustCount("default/counter-1", 2)
	a := in.actor("counter-1")
	prefix := strings.TrimSuffix(a.GetWorker(), a.GetWorker()[strings.LastIndex(a.GetWorker(), "-"):])
	root := filepath.Join("/run/ate", prefix)
	// The actor runs in the only running container: the other workers
	// hold standbys, created but not started.
	out, err := exec.Command(gvisor.DefaultRunscPath(), "--root", root, "list", "-format=json").Output()
	if err != nil {
		t.Fatalf("runsc list: %v", err)
	}
	var list []struct{ ID, Status string }
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("runsc list: %v: %s", err, out)
	}
	var id string
	for _, c := range list {
		if c.Status == "running" {
			if id != "" {
				t.Fatalf("more than one running container with one actor: %s", out)
			}
			id = c.ID
		}
	}
	if id == "" {
		t.Fatalf("no running container for actor %s in %s", a.GetUid(), out)
	}
	if out, err := exec.Command(gvisor.DefaultRunscPath(), "--root", root, "kill", id, "KILL").CombinedOutput(); err != nil {
		t.Fatalf("runsc kill: %v %s", err, out)
	}
	waitFor(t, "the actor to be marked CRASHED", 15*time.Second, func() bool {
		return in.actor("counter-1").GetState() == atev1.ActorState_CRASHED
	})
	if busy := in.busyWorkers(); len(busy) > 0 {
		t.Fatalf("the crashed actor's worker is not free: %v", busy)
	}
	in.mustCount("default/counter-1", 2) // from the snapshot taken at count=1
	if msg := in.actor("counter-1").GetMessage(); !strings.Contains(msg, "after a crash") {
		t.Fatalf("resume after a crash does not say so: %q", msg)
	}
}
