package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"substrate.dev/ate/internal/latency"
	"substrate.dev/ate/internal/snapshot"
)

// workload is one realistic actor of BenchmarkWorkloads: a template file,
// the request timed as its activation, and the check that its memory came
// back intact.
type workload struct {
	name     string // sub-benchmark name, e.g. "python-64MB"
	file     string // template YAML, relative to the repository root
	template string // the template's name in that file
	// path is the request timed from send to first response byte: cheap
	// for the application, so the figure is the activation's.
	path string
	// newState is called once on the running actor before the first
	// cycle; check after every activation, with restored true after a
	// restore of the actor's own memory and false after a cold boot. check
	// fails the benchmark when the state is not what that activation must
	// leave.
	newState func(in *installation, actor string)
	check    func(in *installation, actor string, restored bool)
}

// BenchmarkWorkloads measures realistic actors (BENCHMARKS.md, "Realistic
// workloads"): python-notes holding STATE_MB of live interpreter state and
// the node-sessions example. Each iteration is one cycle per tier, through
// the router, each activation timed from send to the first response byte:
//
//   - suspended: SuspendActor (timed: "checkpoint", the whole workflow
//     from the API's view, drain and snapshot commit included), then a
//     request restores the snapshot from the snapshot store;
//   - paused: PauseActor (timed: "pause"), then a request restores the
//     node-local checkpoint;
//   - cold: a second actor of the same template with snapshotPolicy
//     onSuspend: Data is suspended, and a request cold-boots the image,
//     which rebuilds its state (what the snapshot saves).
//
// After every activation the workload's state is checked: after a
// restore python's /checksum must equal the one taken before the first
// suspend and its note be there, node's session hit counter must have
// carried on; after a cold boot the note or session must be gone (a fresh
// process, not a restore). A mismatch fails the benchmark. The
// suspended snapshot's size on disk (allocated blocks of its files) is
// reported as snapshot-MiB. Each activation waits for the node to prepare
// its standby first, as an actor idle for minutes finds it.
//
// Under `make test` (one iteration) python runs at 0 and 16 MB; under
// `make bench` (fullBench) at 0, 64 and 256 MB.
func BenchmarkWorkloads(b *testing.B) {
	sizes := []int{0, 16}
	if fullBench() {
		sizes = []int{0, 64, 256}
	}
	var loads []workload
	for _, mb := range sizes {
		loads = append(loads, pythonWorkload(mb))
	}
	loads = append(loads, nodeWorkload())
	for _, w := range loads {
		b.Run(w.name, func(b *testing.B) { benchWorkload(b, w) })
	}
}

func benchWorkload(b *testing.B, w workload) {
	// Three workers: the actor and its cold twin may both run while a
	// freed worker prepares the next standby.
	in := startUp(b, 3)
	in.createTemplate(w.file, w.template)
	cold := coldTemplate(b, in, w.file, w.template)
	const actor, twin = "bench", "bench-cold"
	in.ate("create", "actor", actor, "--template", w.template)
	in.ate("create", "actor", twin, "--template", cold)
	for _, a := range []string{actor, twin} { // untimed: each runs before its first checkpoint
		if _, code, body, err := in.firstByte(a, w.path); err != nil || code != http.StatusOK {
			b.Fatalf("GET %s %s = %d %q %v", a, w.path, code, body, err)
		}
	}
	w.newState(in, actor)
	w.newState(in, twin)

	var suspended, paused, coldBoot, checkpoint, pause []time.Duration
	var snapshotBytes []int64
	activate := func(name string, into *[]time.Duration, restored bool) {
		b.StartTimer()
		d, code, body, err := in.firstByte(name, w.path)
		b.StopTimer()
		if err != nil || code != http.StatusOK {
			b.Fatalf("GET %s %s = %d %q %v", name, w.path, code, body, err)
		}
		*into = append(*into, d)
		w.check(in, name, restored)
	}
	for b.Loop() {
		b.StopTimer()
		in.standbyAfter(func() { checkpoint = append(checkpoint, in.timedSuspend(actor)) })
		snapshotBytes = append(snapshotBytes, in.snapshotDiskBytes(actor))
		activate(actor, &suspended, true)

		in.standbyAfter(func() { pause = append(pause, in.timedPause(actor)) })
		activate(actor, &paused, true)

		in.standbyAfter(func() { in.suspend(twin) })
		activate(twin, &coldBoot, false)
		b.StartTimer()
	}
	latency.Report(b, "suspended-", suspended, 0.50, 0.95, 0.99)
	latency.Report(b, "paused-", paused, 0.50, 0.95, 0.99)
	latency.Report(b, "cold-", coldBoot, 0.50, 0.95, 0.99)
	latency.Report(b, "checkpoint-", checkpoint, 0.50, 0.95)
	latency.Report(b, "pause-", pause, 0.50, 0.95)
	b.ReportMetric(float64(medianInt(snapshotBytes))/(1<<20), "snapshot-MiB")
	b.ReportMetric(0, "ns/op")
}

// pythonWorkload is python-notes at STATE_MB=mb, from
// test/e2e/testdata/python-<mb>mb.yaml, holding one note besides its
// ballast: a restore must keep both (same /checksum, same note), a cold
// boot has no note.
func pythonWorkload(mb int) workload {
	want := map[string]string{} // actor -> /checksum of its current process
	note := func(in *installation, actor string) {
		in.t.Helper()
		if code, body := in.do(http.MethodPost, "default/"+actor, "/notes", "first"); code != http.StatusCreated {
			in.t.Fatalf("POST %s /notes = %d %q", actor, code, body)
		}
	}
	return workload{
		name:     fmt.Sprintf("python-%dMB", mb),
		file:     fmt.Sprintf("test/e2e/testdata/python-%dmb.yaml", mb),
		template: fmt.Sprintf("python-%dmb", mb),
		path:     "/notes",
		newState: func(in *installation, actor string) {
			want[actor] = in.checksum(actor, mb)
			note(in, actor)
		},
		check: func(in *installation, actor string, restored bool) {
			in.t.Helper()
			notes := in.notesOf("default/" + actor)
			if !restored {
				// A fresh process with a fresh ballast: nothing to compare
				// its digest with, and hashing it would only slow the run.
				if len(notes) != 0 {
					in.t.Fatalf("%s: notes after a cold boot = %q, want none (a fresh process)", actor, notes)
				}
				note(in, actor)
				return
			}
			if got := in.checksum(actor, mb); got != want[actor] {
				in.t.Fatalf("%s: /checksum after a restore = %s, want %s: the restored memory differs", actor, got, want[actor])
			}
			if len(notes) != 1 || notes[0] != "first" {
				in.t.Fatalf("%s: notes after a restore = %q, want [first]", actor, notes)
			}
		},
	}
}

// nodeWorkload is the node-sessions example with its own template: a
// session whose hit counter must carry on across restores.
func nodeWorkload() workload {
	hits := map[string]int{}
	return workload{
		name:     "node",
		file:     "examples/node-sessions/template.yaml",
		template: "node-sessions",
		path:     "/sessions",
		newState: func(in *installation, actor string) {
			if code, body := in.do(http.MethodPost, "default/"+actor, "/sessions/s1/items", "first"); code != http.StatusCreated {
				in.t.Fatalf("POST %s /sessions/s1/items = %d %q", actor, code, body)
			}
			hits[actor] = 0
		},
		check: func(in *installation, actor string, restored bool) {
			in.t.Helper()
			code, body := in.get("default/"+actor, "/sessions/s1")
			if !restored {
				if code != http.StatusNotFound {
					in.t.Fatalf("%s: GET /sessions/s1 after a cold boot = %d %q, want 404 (a fresh process)", actor, code, body)
				}
				in.do(http.MethodPost, "default/"+actor, "/sessions/s1/items", "first")
				hits[actor] = 0
				return
			}
			var s struct {
				Hits  int      `json:"hits"`
				Items []string `json:"items"`
			}
			if code != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil {
				in.t.Fatalf("%s: GET /sessions/s1 after a restore = %d %q", actor, code, body)
			}
			hits[actor]++
			if s.Hits != hits[actor] || len(s.Items) != 1 || s.Items[0] != "first" {
				in.t.Fatalf("%s: session after a restore = %+v, want %d hits and items [first]", actor, s, hits[actor])
			}
		},
	}
}

// coldTemplate creates (and waits READY for) a copy of the template in
// file named <name>-cold whose suspends keep no memory (snapshotPolicy
// onSuspend: Data), so each resume of a suspended actor of it cold-boots;
// it returns the copy's name.
func coldTemplate(t testing.TB, in *installation, file, name string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoDir, file))
	if err != nil {
		t.Fatal(err)
	}
	cold := name + "-cold"
	text := strings.Replace(string(src), "name: "+name+"\n", "name: "+cold+"\n", 1)
	if text == string(src) {
		t.Fatalf("%s has no line %q", file, "name: "+name)
	}
	text += "snapshotPolicy: {onPause: Full, onSuspend: Data}\n"
	out := filepath.Join(t.TempDir(), cold+".yaml")
	if err := os.WriteFile(out, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	in.ate("create", "template", "-f", out)
	in.waitTemplateReady(cold)
	return cold
}

// firstByte sends GET path to actor (default atespace) through the router
// and returns the time from sending to the first response byte, with the
// status and the whole body.
func (in *installation) firstByte(actor, path string) (time.Duration, int, string, error) {
	var first time.Time
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { first = time.Now() }}
	ctx := httptrace.WithClientTrace(context.Background(), trace)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+in.routerAddr+path, nil)
	if err != nil {
		return 0, 0, "", err
	}
	req.Header.Set("Ate-Target-Actor", "default/"+actor)
	start := time.Now()
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return first.Sub(start), resp.StatusCode, string(body), err
}

// checksumOf GETs python-notes' (or node-sessions') /checksum of actor
// and returns the digest of its STATE_MB ballast; an error when it does
// not answer 200 with a digest (for callers off the test goroutine).
func (in *installation) checksumOf(actor string) (string, error) {
	_, sum, err := in.ballast(actor)
	return sum, err
}

// ballast is checksumOf with the ballast's size in MiB.
func (in *installation) ballast(actor string) (int, string, error) {
	code, body, _, err := in.request(http.MethodGet, "default/"+actor, "/checksum", "")
	var sum struct {
		MB     int    `json:"mb"`
		SHA256 string `json:"sha256"`
	}
	if err != nil || code != http.StatusOK || json.Unmarshal([]byte(body), &sum) != nil || len(sum.SHA256) != 64 {
		return 0, "", fmt.Errorf("GET %s /checksum = %d %q %v, want 200 with a sha256", actor, code, body, err)
	}
	return sum.MB, sum.SHA256, nil
}

// checksum is checksumOf that fails the test unless the ballast is mb MiB.
func (in *installation) checksum(actor string, mb int) string {
	in.t.Helper()
	got, sum, err := in.ballast(actor)
	if err != nil {
		in.t.Fatal(err)
	}
	if got != mb {
		in.t.Fatalf("GET %s /checksum: ballast of %d MiB, want %d", actor, got, mb)
	}
	return sum
}

// timedSuspend suspends actor through the API and returns how long the
// call took (the suspend workflow: drain, checkpoint, commit, record).
func (in *installation) timedSuspend(actor string) time.Duration {
	in.t.Helper()
	start := time.Now()
	in.suspend(actor)
	return time.Since(start)
}

// timedPause is timedSuspend for a pause.
func (in *installation) timedPause(actor string) time.Duration {
	in.t.Helper()
	start := time.Now()
	in.pause(actor)
	return time.Since(start)
}

// snapshotDiskBytes is the disk space (allocated blocks, so holes in
// sparse files do not count) of the suspended actor's current snapshot in
// the installation's local snapshot store.
func (in *installation) snapshotDiskBytes(actor string) int64 {
	in.t.Helper()
	id := snapshot.Bare(in.actor(actor).GetSnapshot())
	if id == "" {
		in.t.Fatalf("%s has no snapshot after a suspend", actor)
	}
	var dir string
	root := filepath.Join(in.dataDir, "snapshots")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == filepath.Base(id) && !strings.Contains(p, ".staging") {
			dir = p
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil || dir == "" {
		in.t.Fatalf("snapshot %s of %s not found under %s: %v", id, actor, root, err)
	}
	var total int64
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		in.t.Fatal(err)
	}
	return total
}

// medianInt is the lower median of v (0 for none), without changing v.
func medianInt(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
