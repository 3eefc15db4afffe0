package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// put writes a file inside the actor through the counter's file API.
func (in *installation) put(actor, path, data string) {
	in.t.Helper()
	if code, body := in.do(http.MethodPut, actor, "/files"+path, data); code != http.StatusNoContent {
		in.t.Fatalf("PUT %s%s = %d %q", actor, path, code, body)
	}
}

// cat reads a file inside the actor; it fails the test unless it reads want.
func (in *installation) cat(actor, path, want string) {
	in.t.Helper()
	code, body := in.get(actor, "/files"+path)
	if code != http.StatusOK || body != want {
		in.t.Fatalf("GET %s%s = %d %q, want %q", actor, path, code, body, want)
	}
}

// slowRequest sends GET /sleep?ms=ms to actor name (default atespace), a
// template with a volume at /data, in the background, and returns once the
// request has reached the actor (it marks /data/arrived on arrival); its
// reply comes on the channel. A mark left by an earlier call (the volume
// is kept in snapshots) is removed first.
func (in *installation) slowRequest(name string, ms int) <-chan reply {
	in.t.Helper()
	mark := filepath.Join(in.dataDir, "node", "workers", in.actor(name).GetWorker(), "volumes", "data", "arrived")
	if err := os.Remove(mark); err != nil && !errors.Is(err, fs.ErrNotExist) {
		in.t.Fatal(err)
	}
	done := make(chan reply, 1)
	go func() {
		done <- in.getReply("default/"+name, fmt.Sprintf("/sleep?ms=%d&mark=/data/arrived", ms))
	}()
	waitFor(in.t, "the slow request to reach the actor", 30*time.Second, func() bool {
		_, err := os.Stat(mark)
		return err == nil
	})
	return done
}

func (in *installation) wantState(name string, want atev1.ActorState) *atev1.Actor {
	in.t.Helper()
	a := in.actor(name)
	if a.GetState() != want {
		in.t.Fatalf("actor %s is %s (%s), want %s", name, a.GetState(), a.GetMessage(), want)
	}
	return a
}

// TestPauseSuspendCycles: ten pause → resume → write files → suspend →
// resume cycles on one actor; after each, every file in the durable
// volume and in the root filesystem, and the in-memory counter, equal
// what was last written.
func TestPauseSuspendCycles(t *testing.T) {
	in := startUp(t, 2)
	in.createTemplate("test/e2e/testdata/durable.yaml", "durable")
	in.ate("create", "actor", "cyc", "--template", "durable")
	const actor = "default/cyc"
	in.mustCount(actor, 1)
	count := 1
	for i := 1; i <= 10; i++ {
		in.ate("pause", "actor", "cyc")
		if a := in.wantState("cyc", atev1.ActorState_PAUSED); a.GetWorker() != "" || a.GetPausedSnapshot() == "" {
			t.Fatalf("cycle %d: paused actor holds worker %q, paused snapshot %q", i, a.GetWorker(), a.GetPausedSnapshot())
		}
		count++
		in.mustCount(actor, count) // resumed from the pause
		in.put(actor, fmt.Sprintf("/data/file-%d", i), fmt.Sprintf("volume %d", i))
		in.put(actor, fmt.Sprintf("/var/tmp/root-%d", i), fmt.Sprintf("rootfs %d", i))
		in.ate("suspend", "actor", "cyc")
		in.wantState("cyc", atev1.ActorState_SUSPENDED)
		count++
		in.mustCount(actor, count) // resumed from the durable snapshot
		for j := 1; j <= i; j++ {
			in.cat(actor, fmt.Sprintf("/data/file-%d", j), fmt.Sprintf("volume %d", j))
			in.cat(actor, fmt.Sprintf("/var/tmp/root-%d", j), fmt.Sprintf("rootfs %d", j))
		}
	}
}

// TestDataScope: with snapshotPolicy.onSuspend Data, a suspend keeps only
// the volume: the resume cold-boots (memory starts over) with /data
// intact, while a pause (Full) keeps memory.
func TestDataScope(t *testing.T) {
	in := startUp(t, 2)
	in.createTemplate("test/e2e/testdata/durable-data.yaml", "durable-data")
	in.ate("create", "actor", "d", "--template", "durable-data")
	in.mustCount("default/d", 1)
	in.mustCount("default/d", 2)
	in.put("default/d", "/data/kept", "yes")
	in.put("default/d", "/var/tmp/lost", "memory only")
	in.ate("pause", "actor", "d")
	in.mustCount("default/d", 3) // Full: memory kept
	in.ate("suspend", "actor", "d")
	in.mustCount("default/d", 1) // Data: cold boot
	in.cat("default/d", "/data/kept", "yes")
	if code, _ := in.get("default/d", "/files/var/tmp/lost"); code != http.StatusNotFound {
		t.Fatalf("root filesystem file survived a Data-scope suspend: %d", code)
	}
}

// TestIdentityFiles: actors started from one golden snapshot each read
// their own identity, before and after a move.
func TestIdentityFiles(t *testing.T) {
	in := startUp(t, 2, "--demo")
	for _, n := range []string{"id-a", "id-b"} {
		in.ate("create", "actor", n, "--template", "counter")
	}
	for round := range 2 {
		for _, n := range []string{"id-a", "id-b"} {
			in.cat("default/"+n, "/run/ate/actor-name", n)
			in.cat("default/"+n, "/run/ate/atespace", "default")
			in.cat("default/"+n, "/run/ate/actor-uid", in.actor(n).GetUid())
		}
		if round == 0 {
			in.ate("suspend", "actor", "id-a")
			in.ate("suspend", "actor", "id-b")
		}
	}
}

// TestInFlightRequestSurvivesSuspend: a request whose handler takes 2 s is
// in flight when suspend is called; it completes with 200. A request that
// arrives while the actor is SUSPENDING is held and served by a resume
// once the suspend is done.
func TestInFlightRequestSurvivesSuspend(t *testing.T) {
	in := startUp(t, 2)
	in.createTemplate("test/e2e/testdata/durable.yaml", "durable")
	in.ate("create", "actor", "slow", "--template", "durable")
	in.mustCount("default/slow", 1)
	done := in.slowRequest("slow", 2000)
	suspended := make(chan string, 1)
	go func() {
		out, err := in.ateErr("suspend", "actor", "slow")
		if err != nil {
			t.Errorf("suspend: %v %s", err, out)
		}
		suspended <- out
	}()
	waitFor(t, "the actor to be SUSPENDING", 30*time.Second, func() bool {
		return in.actor("slow").GetState() == atev1.ActorState_SUSPENDING
	})
	// Arrives during the drain: held, then served after a resume.
	in.mustCount("default/slow", 2)
	r := <-done
	if r.err != nil || r.code != http.StatusOK || !strings.HasPrefix(r.body, "slept 2000 ms") {
		t.Fatalf("in-flight request = %d %q %v", r.code, r.body, r.err)
	}
	<-suspended
	if a := in.actor("slow"); a.GetResumes() != 2 || a.GetState() != atev1.ActorState_RUNNING {
		t.Fatalf("after suspend and the held request: %s with %d resumes, want RUNNING after 2", a.GetState(), a.GetResumes())
	}
}

// TestRevertAndForceDelete: revert drops what happened since the last
// durable snapshot; force delete removes a RUNNING actor.
func TestRevertAndForceDelete(t *testing.T) {
	in := startUp(t, 2, "--demo")
	in.mustCount("default/counter-1", 1)
	in.ate("suspend", "actor", "counter-1")
	in.mustCount("default/counter-1", 2)
	in.mustCount("default/counter-1", 3)
	in.ate("revert", "actor", "counter-1")
	in.wantState("counter-1", atev1.ActorState_SUSPENDED)
	in.mustCount("default/counter-1", 2) // back at the snapshot taken at count=1
	in.ate("pause", "actor", "counter-1")
	in.ate("revert", "actor", "counter-1")
	in.mustCount("default/counter-1", 2)
	in.ate("delete", "actor", "counter-1", "--force")
	if code, _ := in.get("default/counter-1", "/"); code != http.StatusNotFound {
		t.Fatalf("force-deleted actor answered %d", code)
	}
	ws := in.ate("get", "workers", "-o", "json")
	if strings.Contains(ws, atev1.Worker_CLAIMED.String()) {
		t.Fatalf("worker still claimed after force delete:\n%s", ws)
	}
}

// TestCutOffAfterGrace: a request still running when the drain grace
// (drainGraceSeconds: 5 in durable-data.yaml) is over is cut off by the
// checkpoint and answered 503 with Retry-After, never a bare 502.
func TestCutOffAfterGrace(t *testing.T) {
	in := startUp(t, 2)
	in.createTemplate("test/e2e/testdata/durable-data.yaml", "durable-data")
	in.ate("create", "actor", "cut", "--template", "durable-data")
	in.mustCount("default/cut", 1)
	done := in.slowRequest("cut", 60000)
	in.ate("pause", "actor", "cut")
	r := <-done
	if r.err != nil || r.code != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("cut-off request = %d %q (Retry-After %q) %v, want 503 with Retry-After",
			r.code, r.body, r.header.Get("Retry-After"), r.err)
	}
	in.wantState("cut", atev1.ActorState_PAUSED)
	in.mustCount("default/cut", 2) // the pause (Full) kept memory
}

// TestActorAsksForItsOwnSuspension: the actor calls the well-known
// address inside its sandbox; it is suspended (or paused), and the next
// request resumes it with its memory.
func TestActorAsksForItsOwnSuspension(t *testing.T) {
	in := startUp(t, 2, "--demo")
	in.mustCount("default/counter-1", 1)
	for i, action := range []string{"suspend", "pause"} {
		want := map[string]atev1.ActorState{"suspend": atev1.ActorState_SUSPENDED, "pause": atev1.ActorState_PAUSED}[action]
		if code, body := in.do(http.MethodPost, "default/counter-1", "/ask?action="+action, ""); code != http.StatusAccepted {
			t.Fatalf("self-%s = %d %q", action, code, body)
		}
		waitFor(t, "the actor to be "+want.String(), 30*time.Second, func() bool {
			return in.actor("counter-1").GetState() == want
		})
		in.mustCount("default/counter-1", i+2)
	}
}

// TestStandbyIsolation: on one worker, actors take turns through the
// standby the worker prepares after each suspend. Each start goes into a
// standby (the worker's log says so), and no actor sees the volume files
// or identity of the one before it, while each gets its own back.
func TestStandbyIsolation(t *testing.T) {
	in := startUp(t, 1)
	in.createTemplate("test/e2e/testdata/durable.yaml", "durable")
	for _, n := range []string{"sb-a", "sb-b"} {
		in.ate("create", "actor", n, "--template", "durable")
	}
	in.put("default/sb-a", "/data/owner", "a")
	in.standbyAfter(func() { in.ate("suspend", "actor", "sb-a") })
	if code, body := in.get("default/sb-b", "/files/data/owner"); code != http.StatusNotFound {
		t.Fatalf("sb-b reads sb-a's volume file: %d %q", code, body)
	}
	in.cat("default/sb-b", "/run/ate/actor-name", "sb-b")
	in.put("default/sb-b", "/data/owner", "b")
	in.standbyAfter(func() { in.ate("suspend", "actor", "sb-b") })
	in.cat("default/sb-a", "/data/owner", "a")
	in.cat("default/sb-a", "/run/ate/actor-name", "sb-a")

	w := in.actor("sb-a").GetWorker()
	log, err := os.ReadFile(filepath.Join(in.dataDir, "node", "logs", w+".log"))
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	for _, line := range strings.Split(string(log), "\n") {
		if strings.HasPrefix(line, "--- ") && strings.Contains(line, " ate: actor default/sb-") {
			starts++
			if !strings.Contains(line, "container=ate-standby-") {
				t.Errorf("a start after a suspend did not use the standby: %s", line)
			}
		}
	}
	if starts < 3 {
		t.Fatalf("worker log names %d actor starts, want at least 3:\n%s", starts, log)
	}
}
