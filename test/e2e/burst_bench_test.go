package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sync/errgroup"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/latency"
)

// BenchmarkResumeBurst measures activations per second on one node:
// every actor of the node is suspended, then all of them are requested at
// once through the router, one GET each, and the round ends when the last
// has answered. Each iteration is one such round (the actors are
// suspended again, untimed, before the next), so `-benchtime 2x` is the
// issue's "then a second round". --workers is sized to hold every actor,
// so no request waits for an eviction; a free worker holds a standby for
// the template it hosted last, as a node left idle for a while has.
//
// Sub-benchmarks, on one installation: "counters" is the counter actors
// alone (the python actors stay suspended); "mixed" adds the python-notes
// actors, each holding STATE_MB of live state, to the same round. Reported per round: burst-s (send to last answer),
// act/s (actors / burst-s), and for each kind its own activations/s (that
// kind's actors / the time its last one answered) and p50/p99 of one GET
// from send to full response. Full size (make bench): 50 counters, plus
// 20 python actors at 64 MB; make test's one iteration: 6 counters, plus
// 2 at 16 MB.
//
// CPU time is reported too, since on a shared 2-core machine the timings
// move with everyone else's load while CPU seconds barely do:
// ate-cpu-ms/act is `ate up`'s (router, API server, store, node agent,
// runsc's library) per activation, sandbox-cpu-ms/act that of this
// installation's runsc sandbox and gofer processes (restore, wakeup probe,
// the request itself), and cpu-ceiling-act/s the rate this machine's
// cores would allow if activations used nothing but their sum.
//
// Every answer is checked: 200, an Ate-Activation of "resumed" (the GET
// woke the actor, it did not find it running), and the actor's own memory
// (the counter's count goes up by one per round; a python actor answers
// the memo it was given before its first suspend, and its ballast's
// checksum is unchanged after every round, checked untimed).
func BenchmarkResumeBurst(b *testing.B) {
	counters, pythons, stateMB := 6, 2, 16
	if fullBench() {
		counters, pythons, stateMB = 50, 20, 64
	}
	in := startUp(b, counters+pythons)
	actors := in.burstActors(counters, pythons, stateMB)
	// The sub-benchmarks share the installation; its helpers fail the
	// sub-benchmark that calls them.
	sub := func(b *testing.B, actors []*burstActor) {
		in.t = b
		benchBurst(b, in, actors)
	}
	b.Run("counters", func(b *testing.B) { sub(b, actors[:counters]) })
	b.Run("mixed", func(b *testing.B) { sub(b, actors) })
	in.t = b
}

// burstActor is one actor of a burst and how its answer is checked.
type burstActor struct {
	name   string
	python bool
	// running is whether it is RUNNING (a round suspends it first).
	running bool
	// rounds is how many timed GETs it has answered.
	rounds int
	// checksum is the python actor's ballast digest before any round.
	checksum string
}

// burstResult is one GET of a round.
type burstResult struct {
	python  bool
	elapsed time.Duration
	// done is when it answered, from the round's start.
	done time.Duration
	err  error
}

// burstActors creates a counter template and counters of its actors,
// and a python-notes template holding stateMB MiB of state and pythons of
// its actors, and has each answer once (from its template's golden
// snapshot), so that every round restores a snapshot of the actor's own;
// a python actor is given its memo and its checksum is taken. The python
// actors are then suspended, the counters left running.
func (in *installation) burstActors(counters, pythons, stateMB int) []*burstActor {
	in.t.Helper()
	in.counterTemplate("counter", nil, "")
	in.stateTemplate("notes-state", stateMB)
	var actors []*burstActor
	for i := range counters {
		actors = append(actors, &burstActor{name: fmt.Sprintf("counter-%d", i+1)})
	}
	for i := range pythons {
		actors = append(actors, &burstActor{name: fmt.Sprintf("notes-%d", i+1), python: true})
	}
	ctx := context.Background()
	for _, a := range actors {
		tpl := "counter"
		if a.python {
			tpl = "notes-state"
		}
		if _, err := in.client.CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{Atespace: "default", Name: a.name, Template: tpl}}); err != nil {
			in.t.Fatal(err)
		}
	}
	in.eachActor(actors, func(a *burstActor) error {
		a.running = true
		if !a.python {
			return in.checkBurstAnswer(a, "/", "count=1")
		}
		if code, body, _, err := in.request(http.MethodPut, "default/"+a.name, "/memo", a.name); err != nil || code != http.StatusNoContent {
			return fmt.Errorf("PUT %s /memo = %d %q %v", a.name, code, body, err)
		}
		var err error
		a.checksum, err = in.checksumOf(a.name)
		return err
	})
	in.suspendAll(actors[counters:])
	return actors
}

// benchBurst runs one round per iteration over actors (counters first,
// then python actors) and reports the round's metrics.
func benchBurst(b *testing.B, in *installation, actors []*burstActor) {
	n := len(actors)
	counters := slices.IndexFunc(actors, func(a *burstActor) bool { return a.python })
	if counters < 0 {
		counters = n
	}
	pythons := n - counters
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}, Timeout: 2 * time.Minute}
	defer client.CloseIdleConnections()
	var all, counter, python []time.Duration
	var burst, counterDone, pythonDone time.Duration
	var cpu cpuUse
	for b.Loop() {
		b.StopTimer()
		in.suspendAll(actors)
		b.StartTimer()
		before := in.cpuUse()
		results := in.activateAll(client, actors)
		cpu = cpu.add(in.cpuUse().sub(before))
		b.StopTimer()
		var last [2]time.Duration // by kind: counter, python
		for i, r := range results {
			if r.err != nil {
				b.Fatalf("%s: %v", actors[i].name, r.err)
			}
			all = append(all, r.elapsed)
			k := 0
			if r.python {
				k = 1
				python = append(python, r.elapsed)
			} else {
				counter = append(counter, r.elapsed)
			}
			last[k] = max(last[k], r.done)
		}
		burst += max(last[0], last[1])
		counterDone += last[0]
		pythonDone += last[1]
		// Untimed: the ballast survived the round.
		in.eachActor(actors, func(a *burstActor) error {
			if !a.python {
				return nil
			}
			sum, err := in.checksumOf(a.name)
			if err == nil && sum != a.checksum {
				err = fmt.Errorf("%s: ballast checksum %s after round %d, was %s", a.name, sum, a.rounds, a.checksum)
			}
			return err
		})
		b.StartTimer()
	}
	rounds := float64(len(all) / n)
	b.ReportMetric(burst.Seconds()/rounds, "burst-s")
	b.ReportMetric(float64(len(all))/burst.Seconds(), "act/s")
	latency.Report(b, "", all, 0.50, 0.99)
	perAct := func(sec float64) float64 { return sec * 1000 / float64(len(all)) }
	b.ReportMetric(perAct(cpu.ate), "ate-cpu-ms/act")
	b.ReportMetric(perAct(cpu.sandboxes), "sandbox-cpu-ms/act")
	b.ReportMetric(float64(runtime.NumCPU())*1000/perAct(cpu.ate+cpu.sandboxes), "cpu-ceiling-act/s")
	if counters > 0 {
		b.ReportMetric(float64(len(counter))/counterDone.Seconds(), "counter-act/s")
		latency.Report(b, "counter-", counter, 0.50, 0.99)
	}
	if pythons > 0 {
		b.ReportMetric(float64(len(python))/pythonDone.Seconds(), "python-act/s")
		latency.Report(b, "python-", python, 0.50, 0.99)
	}
	b.ReportMetric(0, "ns/op")
}

// activateAll sends one GET to every actor at once and returns each one's
// result, in actors' order. A counter must answer its next count, a
// python actor its memo; every answer must say the GET resumed the actor.
func (in *installation) activateAll(client *http.Client, actors []*burstActor) []burstResult {
	results := make([]burstResult, len(actors))
	reqs := make([]*http.Request, len(actors))
	for i, a := range actors {
		path := "/"
		if a.python {
			path = "/memo"
		}
		reqs[i] = in.newRequest(context.Background(), http.MethodGet, "default/"+a.name, path, nil)
	}
	var wg sync.WaitGroup
	ready, gun := sync.WaitGroup{}, make(chan struct{})
	ready.Add(len(actors))
	var start time.Time
	for i, a := range actors {
		wg.Go(func() {
			ready.Done()
			<-gun
			t0 := time.Now()
			body, hdr, err := burstGet(client, reqs[i])
			end := time.Now()
			results[i] = burstResult{python: a.python, elapsed: end.Sub(t0), done: end.Sub(start), err: err}
			if err != nil {
				return
			}
			a.rounds++
			a.running = true
			want := a.name
			if !a.python {
				want = fmt.Sprintf("count=%d", a.rounds+1)
			}
			if strings.TrimSpace(body) != want {
				results[i].err = fmt.Errorf("GET %s = %q, want %q", reqs[i].URL.Path, body, want)
			} else if act := hdr.Get("Ate-Activation"); act != "resumed" {
				results[i].err = fmt.Errorf("Ate-Activation %q, want resumed (the actor was not suspended)", act)
			}
		})
	}
	ready.Wait()
	start = time.Now()
	close(gun)
	wg.Wait()
	return results
}

// burstGet sends req and returns the body of a 200 answer.
func burstGet(client *http.Client, req *http.Request) (string, http.Header, error) {
	resp, err := client.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d %q", resp.StatusCode, body)
	}
	return string(body), resp.Header, err
}

// burstSetupParallel is how many untimed calls (first requests,
// suspends, checksums) run at once: enough to keep 2 cores busy, few
// enough that none waits long.
const burstSetupParallel = 4

// eachActor runs f for every actor, burstSetupParallel at a time, and
// fails the benchmark with the first error.
func (in *installation) eachActor(actors []*burstActor, f func(*burstActor) error) {
	in.t.Helper()
	var g errgroup.Group
	g.SetLimit(burstSetupParallel)
	for _, a := range actors {
		g.Go(func() error { return f(a) })
	}
	if err := g.Wait(); err != nil {
		in.t.Fatal(err)
	}
}

// suspendAll suspends every running actor of actors and waits until each worker it freed
// holds its standby again, so a round starts on a node at rest.
func (in *installation) suspendAll(actors []*burstActor) {
	in.t.Helper()
	var running []*burstActor
	for _, a := range actors {
		if a.running {
			running = append(running, a)
		}
	}
	want := in.standbysPrepared() + len(running)
	in.eachActor(running, func(a *burstActor) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := in.client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: a.name})
		a.running = err != nil
		return err
	})
	waitFor(in.t, fmt.Sprintf("the node to prepare standby %d", want), 3*time.Minute,
		func() bool { return in.standbysPrepared() >= want })
}

// checkBurstAnswer GETs path of actor a and checks it answers want.
func (in *installation) checkBurstAnswer(a *burstActor, path, want string) error {
	code, body, _, err := in.request(http.MethodGet, "default/"+a.name, path, "")
	if err != nil || code != http.StatusOK || strings.TrimSpace(body) != want {
		return fmt.Errorf("GET %s %s = %d %q %v, want %q", a.name, path, code, body, err, want)
	}
	return nil
}

// stateTemplate creates template name running python-notes with STATE_MB
// set to stateMB and waits until its golden snapshot is READY.
func (in *installation) stateTemplate(name string, stateMB int) {
	in.t.Helper()
	doc := fmt.Sprintf(`name: %s
containers:
- name: notes
  image: oci:%s
  command: ["/usr/bin/python3", "/app/notes.py"]
  ports: [8080]
  env: {STATE_MB: "%d"}
wakeupProbe:
  httpGet: {path: /healthz, port: 8080}
  afterRestore: skip
newActors: golden
`, name, filepath.Join(repoDir, "build/images/python-notes"), stateMB)
	file := filepath.Join(in.t.TempDir(), name+".yaml")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		in.t.Fatal(err)
	}
	in.ate("create", "template", "-f", file)
	in.waitTemplateReady(name)
}

// cpuUse is CPU time, user plus system, in seconds.
type cpuUse struct {
	// ate is `ate up`'s, with the runsc commands it ran and reaped.
	ate float64
	// sandboxes is the runsc sandbox and gofer processes' of the
	// installation (those whose command line names its data dir), with
	// their children alive (a sandbox's stub processes) or reaped.
	sandboxes float64
}

func (c cpuUse) add(d cpuUse) cpuUse { return cpuUse{c.ate + d.ate, c.sandboxes + d.sandboxes} }
func (c cpuUse) sub(d cpuUse) cpuUse { return cpuUse{c.ate - d.ate, c.sandboxes - d.sandboxes} }

// cpuUse reads the CPU time used so far by `ate up` and the installation's
// runsc processes from /proc. A difference of two readings counts what
// ran between them as long as no sandbox exited meanwhile (a round
// starts none: each restore goes into a standby that already runs).
func (in *installation) cpuUse() cpuUse {
	in.t.Helper()
	procs, err := procfs.AllProcs()
	if err != nil {
		in.t.Fatal(err)
	}
	// procfs counts reaped children's time in clock ticks of 1/userHZ s.
	const userHZ = 100
	var use cpuUse
	var runsc []int // pids of the installation's sandboxes and gofers
	stats := map[int]procfs.ProcStat{}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue // it exited meanwhile
		}
		stats[p.PID] = st
		own := p.PID == in.cmd.Process.Pid
		if !own {
			args, err := p.CmdLine()
			own = err == nil && len(args) > 0 && strings.HasPrefix(args[0], "runsc-") &&
				slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, in.dataDir) })
			if own {
				runsc = append(runsc, p.PID)
			}
		}
		if !own {
			continue
		}
		t := st.CPUTime() + float64(st.CUTime+st.CSTime)/userHZ
		if p.PID == in.cmd.Process.Pid {
			use.ate += t
		} else {
			use.sandboxes += t
		}
	}
	for _, st := range stats {
		if slices.Contains(runsc, st.PPID) {
			use.sandboxes += st.CPUTime()
		}
	}
	return use
}
