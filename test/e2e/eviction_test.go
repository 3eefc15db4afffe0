package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/latency"
)

// Eviction under capacity pressure: a resume that finds no free worker
// queues (FIFO) and the control plane checkpoints the least recently used
// idle RUNNING actor with its template's idle action to make room.

// logged counts the `ate up` log records with message msg about actor
// name, e.g. "waiting for a free worker": the API server queued a resume
// for the actor.
func (in *installation) logged(msg, name string) int {
	n := 0
	for _, rec := range in.logRecords(msg) {
		if loggedActor(rec) == name {
			n++
		}
	}
	return n
}

// waitQueued waits until the API server has queued one more resume of
// actor name for a worker than it had when queued was read.
func (in *installation) waitQueued(name string, queued int) {
	in.t.Helper()
	waitFor(in.t, "a resume of "+name+" to queue for a worker", 30*time.Second,
		func() bool { return in.logged("waiting for a free worker", name) > queued })
}

// actorJSON is what `ate get actor NAME -o json` says about a checkpoint.
type actorJSON struct {
	State      string `json:"state"`
	Reason     string `json:"reason"`
	EvictedFor string `json:"evictedFor"`
	Message    string `json:"message"`
}

func (in *installation) actorJSON(name string) actorJSON {
	in.t.Helper()
	out := in.ate("get", "actor", name, "-o", "json")
	var a actorJSON
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		in.t.Fatalf("ate get actor %s -o json: %v\n%s", name, err, out)
	}
	return a
}

// actorRow returns `ate get actor NAME`'s row by column header.
func (in *installation) actorRow(name string) map[string]string {
	in.t.Helper()
	out := in.ate("get", "actor", name)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		in.t.Fatalf("ate get actor %s: want a header and one row:\n%s", name, out)
	}
	// tabwriter pads columns with at least 3 spaces; cells such as
	// "evicted for default/x" hold single ones.
	sep := regexp.MustCompile(`\s{2,}`)
	header, row := sep.Split(strings.TrimSpace(lines[0]), -1), sep.Split(strings.TrimSpace(lines[1]), -1)
	if len(header) != len(row) {
		in.t.Fatalf("ate get actor %s: %d headers, %d cells:\n%s", name, len(header), len(row), out)
	}
	m := map[string]string{}
	for i, h := range header {
		m[h] = row[i]
	}
	return m
}

// wantEvicted checks through the API that victim was suspended to make
// room for forActor (both in the default atespace).
func (in *installation) wantEvicted(victim, forActor string) {
	in.t.Helper()
	a := in.actor(victim)
	if a.GetState() != atev1.ActorState_SUSPENDED || a.GetReason() != atev1.CheckpointReason_EVICTED ||
		a.GetEvictedFor() != "default/"+forActor ||
		!strings.Contains(a.GetMessage(), "suspended to make room for default/"+forActor) {
		in.t.Fatalf("%s: %s reason %s evictedFor %q message %q; want SUSPENDED, EVICTED for default/%s",
			victim, a.GetState(), a.GetReason(), a.GetEvictedFor(), a.GetMessage(), forActor)
	}
}

// wantUntouched checks that actor name is RUNNING and was not resumed
// again since it had resumes: nothing checkpointed it meanwhile.
func (in *installation) wantUntouched(name string, resumes int64) {
	in.t.Helper()
	a := in.actor(name)
	if a.GetState() != atev1.ActorState_RUNNING || a.GetResumes() != resumes || a.GetReason() != atev1.CheckpointReason_CHECKPOINT_REASON_UNSPECIFIED {
		in.t.Fatalf("%s: %s (reason %s, %q) after %d resumes; want RUNNING after %d, never put away",
			name, a.GetState(), a.GetReason(), a.GetMessage(), a.GetResumes(), resumes)
	}
}

// evictedActivation is the Ate-Activation of a request whose resume
// evicted an actor: the router says an eviction happened, never whose
// (the record of the actor evicted says whom for: wantEvicted).
const evictedActivation = `resumed;evicted`

// TestEvictionThreeActors: three actors on two workers. The third
// request evicts the least recently used (counter-1) and is answered
// within a second, saying so in Ate-Activation; counter-1's record says
// why it was suspended, and its next request finds its state.
func TestEvictionThreeActors(t *testing.T) {
	in := startUp(t, 2, "--demo")
	for _, name := range []string{"counter-2", "counter-3"} {
		in.ate("create", "actor", name, "--template", "counter")
	}
	for i, name := range []string{"counter-1", "counter-2", "counter-3"} {
		start := time.Now()
		r := in.getReply("default/"+name, "/")
		took := time.Since(start)
		if r.err != nil || r.code != http.StatusOK || r.body != "count=1" {
			t.Fatalf("GET %s: %d %q %v, want 200 count=1", name, r.code, r.body, r.err)
		}
		act := r.header.Get("Ate-Activation")
		t.Logf("GET %s: %s in %s (Ate-Activation %q, Ate-Activation-Ms %s)", name, r.body, took, act, r.header.Get("Ate-Activation-Ms"))
		if i < 2 {
			if act != "resumed" {
				t.Errorf("GET %s: Ate-Activation %q, want resumed (a worker was free)", name, act)
			}
			continue
		}
		if want := evictedActivation; act != want {
			t.Errorf("GET %s: Ate-Activation %q, want %q", name, act, want)
		}
		if took >= time.Second {
			t.Errorf("GET %s (evicting counter-1) took %s, want < 1s", name, took)
		}
	}

	in.wantEvicted("counter-1", "counter-3")
	if a := in.actorJSON("counter-1"); a.State != "SUSPENDED" || a.Reason != "EVICTED" || a.EvictedFor != "default/counter-3" ||
		!strings.Contains(a.Message, "suspended to make room for default/counter-3") {
		t.Errorf("ate get actor counter-1 -o json: %+v; want SUSPENDED, reason EVICTED, evictedFor default/counter-3", a)
	}
	if row := in.actorRow("counter-1"); row["REASON"] != "evicted for default/counter-3" || row["STATE"] != "SUSPENDED" {
		t.Errorf("ate get actor counter-1: STATE %q REASON %q, want SUSPENDED, \"evicted for default/counter-3\"", row["STATE"], row["REASON"])
	}
	in.wantState("counter-2", atev1.ActorState_RUNNING)
	in.wantState("counter-3", atev1.ActorState_RUNNING)

	// counter-1 again: its count survived the eviction; counter-2 is now
	// the least recently used.
	r := in.getReply("default/counter-1", "/")
	if r.err != nil || r.code != http.StatusOK || r.body != "count=2" {
		t.Fatalf("GET counter-1 after its eviction: %d %q %v, want 200 count=2", r.code, r.body, r.err)
	}
	if act, want := r.header.Get("Ate-Activation"), evictedActivation; act != want {
		t.Errorf("GET counter-1 after its eviction: Ate-Activation %q, want %q", act, want)
	}
	in.wantEvicted("counter-2", "counter-1")
	if row := in.actorRow("counter-1"); row["REASON"] != "<none>" || row["STATE"] != "RUNNING" {
		t.Errorf("ate get actor counter-1 after its resume: STATE %q REASON %q, want RUNNING without a reason", row["STATE"], row["REASON"])
	}
}

// TestEvictionLoad: 8 counter actors on 2 workers, 16 concurrent
// clients, 200 requests round-robin over the actors, so most find their
// actor evicted. Every request is answered 200, and each actor saw
// exactly its own requests, counted 1..N with none lost or repeated
// across its evictions. Also with a 10 s park budget: still no 503.
func TestEvictionLoad(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"default park budget", nil},
		{"park budget 10s", []string{"--park-budget", "10s"}},
	} {
		t.Run(tc.name, func(t *testing.T) { evictionLoad(t, tc.flags...) })
	}
}

func evictionLoad(t *testing.T, flags ...string) {
	const actors, clients, requests = 8, 16, 200
	in := startUp(t, 2, append([]string{"--demo"}, flags...)...)
	for i := 2; i <= actors; i++ {
		in.ate("create", "actor", fmt.Sprintf("counter-%d", i), "--template", "counter")
	}
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 2 * time.Minute}

	type result struct {
		actor, body, activation string
		code                    int
		err                     error
		took                    time.Duration
	}
	results := make([]result, requests)
	next := make(chan int, requests)
	for i := range requests {
		next <- i
	}
	close(next)
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := range next {
				r := result{actor: fmt.Sprintf("counter-%d", i%actors+1)}
				req, err := http.NewRequest(http.MethodGet, in.routerURL()+"/", nil)
				if err != nil {
					r.err = err
					results[i] = r
					continue
				}
				req.Header.Set("Ate-Target-Actor", "default/"+r.actor)
				t0 := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					var b []byte
					b, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					r.code, r.body, r.activation = resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("Ate-Activation")
				}
				r.err, r.took = err, time.Since(t0)
				results[i] = r
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	var lat []time.Duration
	seen := map[string]map[int]bool{}
	want := map[string]int{}
	activations := map[string]int{}
	failures := 0
	for i, r := range results {
		want[r.actor]++
		lat = append(lat, r.took)
		if r.err != nil || r.code != http.StatusOK {
			failures++
			if failures <= 10 {
				t.Errorf("request %d (%s): %d %q %v after %s", i, r.actor, r.code, r.body, r.err, r.took)
			}
			continue
		}
		kind, _, evicted := strings.Cut(r.activation, ";")
		if evicted {
			kind += ";evicted"
		}
		activations[kind]++
		n, err := strconv.Atoi(strings.TrimPrefix(r.body, "count="))
		if err != nil || !strings.HasPrefix(r.body, "count=") {
			t.Errorf("request %d (%s): body %q, want count=N", i, r.actor, r.body)
			continue
		}
		if seen[r.actor] == nil {
			seen[r.actor] = map[int]bool{}
		}
		if seen[r.actor][n] {
			t.Errorf("%s answered count=%d twice: a request ran on a lost state", r.actor, n)
		}
		seen[r.actor][n] = true
	}
	if failures > 0 {
		t.Errorf("%d of %d requests failed", failures, requests)
	}
	for actor, n := range want {
		for c := 1; c <= n; c++ {
			if !seen[actor][c] {
				t.Errorf("%s: no request saw count=%d (it got %d requests; seen %v)", actor, c, n, slices.Sorted(maps.Keys(seen[actor])))
				break
			}
		}
		if got := len(seen[actor]); got != n {
			t.Errorf("%s: %d distinct counts, want exactly its %d requests", actor, got, n)
		}
	}
	t.Logf("%d requests, %d clients, %d actors on 2 workers in %s: %.1f req/s; latency p50 %s p95 %s p99 %s max %s",
		requests, clients, actors, elapsed.Round(time.Millisecond), float64(requests)/elapsed.Seconds(),
		latency.Quantile(lat, 0.50).Round(time.Millisecond), latency.Quantile(lat, 0.95).Round(time.Millisecond),
		latency.Quantile(lat, 0.99).Round(time.Millisecond), slices.Max(lat).Round(time.Millisecond))
	t.Logf("activations %v; %d evictions logged", activations, strings.Count(in.logText(), `"msg":"actor evicted"`))
	if activations["resumed;evicted"] == 0 {
		t.Errorf("no request reported an eviction (activations %v): 8 actors on 2 workers must evict", activations)
	}
}

// timed is one request with when it was sent and answered.
type timed struct {
	actor      string
	sent, done time.Time
	code       int
	body       string
	err        error
}

func (in *installation) timedGet(actor string) timed {
	sent := time.Now()
	r := in.getReply("default/"+actor, "/")
	return timed{actor: actor, sent: sent, done: r.at, code: r.code, body: r.body, err: r.err}
}

// TestEvictionFairness: one worker. A waits first (the worker busy with a
// slow request on X), then B, C and D each send a stream of requests.
// Workers go to waiters in arrival order: A is answered before any
// request of B, C, D, and the first requests of A, B, C, D complete in
// the order they arrived.
func TestEvictionFairness(t *testing.T) {
	const each = 3
	in := startUp(t, 1)
	in.createTemplate("test/e2e/testdata/durable.yaml", "durable")
	for _, name := range []string{"x", "a", "b", "c", "d"} {
		in.ate("create", "actor", name, "--template", "durable")
	}
	in.mustCount("default/x", 1)
	slow := in.slowRequest("x", 1500)

	queued := in.logged("waiting for a free worker", "a")
	parked := in.parkedLogged(1)
	aDone := make(chan timed, 1)
	go func() { aDone <- in.timedGet("a") }()
	waitFor(t, "A's request to park", 30*time.Second, func() bool { return in.parkedLogged(1) > parked })
	in.waitQueued("a", queued)

	results := map[string][]timed{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range []string{"b", "c", "d"} {
		queued := in.logged("waiting for a free worker", name)
		wg.Go(func() {
			for range each {
				r := in.timedGet(name)
				mu.Lock()
				results[name] = append(results[name], r)
				mu.Unlock()
			}
		})
		// The next actor's first request arrives after this one's is in
		// line, so arrival order is well defined.
		in.waitQueued(name, queued)
	}
	a := <-aDone
	wg.Wait()
	if r := <-slow; r.err != nil || r.code != http.StatusOK {
		t.Fatalf("X's slow request: %d %q %v", r.code, r.body, r.err)
	}

	if a.err != nil || a.code != http.StatusOK || a.body != "count=1" {
		t.Fatalf("A: %d %q %v, want 200 count=1", a.code, a.body, a.err)
	}
	t.Logf("A waited %s", a.done.Sub(a.sent).Round(time.Millisecond))
	firsts := []timed{a}
	for _, name := range []string{"b", "c", "d"} {
		for i, r := range results[name] {
			if r.err != nil || r.code != http.StatusOK || r.body != fmt.Sprintf("count=%d", i+1) {
				t.Fatalf("%s request %d: %d %q %v, want 200 count=%d", name, i+1, r.code, r.body, r.err, i+1)
			}
			t.Logf("%s request %d: sent +%s, answered +%s", name, i+1,
				r.sent.Sub(a.sent).Round(time.Millisecond), r.done.Sub(a.sent).Round(time.Millisecond))
			if r.sent.After(a.sent) && !a.done.Before(r.done) {
				t.Errorf("%s request %d (sent %s after A's) answered %s before A's",
					name, i+1, r.sent.Sub(a.sent).Round(time.Millisecond), a.done.Sub(r.done).Round(time.Millisecond))
			}
		}
		firsts = append(firsts, results[name][0])
	}
	for i := 1; i < len(firsts); i++ {
		prev, cur := firsts[i-1], firsts[i]
		if !cur.sent.After(prev.sent) {
			t.Fatalf("first requests of %s and %s were not sent in order", prev.actor, cur.actor)
		}
		if !cur.done.After(prev.done) {
			t.Errorf("%s's first request (sent after %s's) was answered %s before it",
				cur.actor, prev.actor, prev.done.Sub(cur.done).Round(time.Millisecond))
		}
	}
}

// TestEvictionNeverTakesBusyOrProtected: eviction picks an idle actor
// over a busy one however long ago the busy one started, never takes an
// actor whose template says evictable: false, and when every worker is
// busy the request parks until a worker frees or its budget runs out.
func TestEvictionNeverTakesBusyOrProtected(t *testing.T) {
	t.Run("busy actor is not evicted", func(t *testing.T) {
		in := startUp(t, 2)
		in.createTemplate("test/e2e/testdata/durable.yaml", "durable")
		for _, name := range []string{"busy", "idle", "third"} {
			in.ate("create", "actor", name, "--template", "durable")
		}
		in.mustCount("default/busy", 1) // started first
		in.mustCount("default/idle", 1)
		busyResumes := in.actor("busy").GetResumes()
		slow := in.slowRequest("busy", 4000)
		in.mustCount("default/idle", 2) // used after busy's request started

		r := in.getReply("default/third", "/")
		if r.err != nil || r.code != http.StatusOK || r.body != "count=1" {
			t.Fatalf("GET third: %d %q %v, want 200 count=1", r.code, r.body, r.err)
		}
		t.Logf("GET third: Ate-Activation %q after %s ms", r.header.Get("Ate-Activation"), r.header.Get("Ate-Activation-Ms"))
		if act, want := r.header.Get("Ate-Activation"), evictedActivation; act != want {
			t.Errorf("GET third: Ate-Activation %q, want %q (busy has a request in flight)", act, want)
		}
		in.wantEvicted("idle", "third")
		in.wantUntouched("busy", busyResumes)
		s := <-slow
		if s.err != nil || s.code != http.StatusOK || s.body != "slept 4000 ms tag=" {
			t.Fatalf("busy's slow request: %d %q %v, want 200 slept 4000 ms", s.code, s.body, s.err)
		}
		in.wantUntouched("busy", busyResumes)

		// Every worker busy: a request for idle parks and is served once
		// a sleep ends, by evicting that actor (no 503).
		slowBusy := in.slowRequest("busy", 3000)
		slowThird := in.slowRequest("third", 3000)
		r = in.getReply("default/idle", "/")
		sb, st := <-slowBusy, <-slowThird
		for _, s := range []reply{sb, st} {
			if s.err != nil || s.code != http.StatusOK {
				t.Fatalf("slow request: %d %q %v", s.code, s.body, s.err)
			}
		}
		if r.err != nil || r.code != http.StatusOK || r.body != "count=3" {
			t.Fatalf("GET idle with every worker busy: %d %q %v, want 200 count=3 once a worker frees", r.code, r.body, r.err)
		}
		freed := sb.at
		if st.at.Before(freed) {
			freed = st.at
		}
		t.Logf("GET idle with every worker busy: Ate-Activation %q after %s ms, answered %s after the first sleep ended",
			r.header.Get("Ate-Activation"), r.header.Get("Ate-Activation-Ms"), r.at.Sub(freed).Round(time.Millisecond))
		if !r.at.After(freed) {
			t.Errorf("GET idle answered %s before any busy worker freed", freed.Sub(r.at))
		}
		if act := r.header.Get("Ate-Activation"); act != evictedActivation {
			t.Errorf("GET idle: Ate-Activation %q, want resumed evicting busy or third", act)
		}
	})

	t.Run("not evictable, budget 3s", func(t *testing.T) {
		const budget = 3 * time.Second
		in := startUp(t, 2, "--park-budget", budget.String())
		in.createTemplate("test/e2e/testdata/durable.yaml", "durable")
		in.pinnedCounterTemplate("pinned")
		for _, name := range []string{"pinned-1", "pinned-2", "pinned-3"} {
			in.ate("create", "actor", name, "--template", "pinned")
		}
		in.mustCount("default/pinned-1", 1)
		in.mustCount("default/pinned-2", 1)
		resumes := map[string]int64{}
		for _, name := range []string{"pinned-1", "pinned-2"} {
			resumes[name] = in.actor(name).GetResumes()
		}

		start := time.Now()
		code, body, hdr, err := in.request(http.MethodGet, "default/pinned-3", "/", "")
		took := time.Since(start)
		t.Logf("GET pinned-3 with both workers pinned: %d %q after %s", code, strings.TrimSpace(body), took.Round(time.Millisecond))
		if err != nil || code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" ||
			!strings.Contains(body, "park budget of 3s exhausted") {
			t.Fatalf("GET pinned-3: %d %q Retry-After %q %v; want 503 naming the budget, with Retry-After", code, body, hdr.Get("Retry-After"), err)
		}
		if took < budget {
			t.Errorf("GET pinned-3 answered after %s, before the park budget (%s) ran out", took, budget)
		}
		for name, n := range resumes {
			in.wantUntouched(name, n)
		}

		// Every worker busy, the budget shorter than the sleeps: 503
		// once the budget runs out, not before; the sleeps finish.
		in.suspend("pinned-1")
		in.suspend("pinned-2")
		for _, name := range []string{"d-1", "d-2", "d-3"} {
			in.ate("create", "actor", name, "--template", "durable")
		}
		in.mustCount("default/d-1", 1)
		in.mustCount("default/d-2", 1)
		busy := map[string]int64{"d-1": in.actor("d-1").GetResumes(), "d-2": in.actor("d-2").GetResumes()}
		s1 := in.slowRequest("d-1", 8000)
		s2 := in.slowRequest("d-2", 8000)
		start = time.Now()
		code, body, hdr, err = in.request(http.MethodGet, "default/d-3", "/", "")
		took = time.Since(start)
		t.Logf("GET d-3 with every worker busy: %d %q after %s", code, strings.TrimSpace(body), took.Round(time.Millisecond))
		if err != nil || code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
			t.Fatalf("GET d-3: %d %q Retry-After %q %v; want 503 with Retry-After", code, body, hdr.Get("Retry-After"), err)
		}
		if took < budget {
			t.Errorf("GET d-3 refused after %s, before its park budget (%s) ran out", took, budget)
		}
		for _, s := range []<-chan reply{s1, s2} {
			if r := <-s; r.err != nil || r.code != http.StatusOK || r.body != "slept 8000 ms tag=" {
				t.Fatalf("slow request: %d %q %v, want 200", r.code, r.body, r.err)
			}
		}
		for name, n := range busy {
			in.wantUntouched(name, n)
		}
	})
}

// TestCoalescedResumeSurvivesFirstCallerLeaving: the request that
// started a resume (waiting for the only worker, busy with a slow
// request) goes away; the two requests that joined it are still served,
// by that one resume.
func TestCoalescedResumeSurvivesFirstCallerLeaving(t *testing.T) {
	in := startUp(t, 1)
	in.createTemplate("test/e2e/testdata/durable.yaml", "durable")
	for _, name := range []string{"x", "y"} {
		in.ate("create", "actor", name, "--template", "durable")
	}
	in.mustCount("default/x", 1)
	before := in.actor("y").GetResumes()
	slow := in.slowRequest("x", 2000)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan error, 1)
	queued := in.logged("waiting for a free worker", "y")
	go func() {
		resp, err := httpClient.Do(in.newRequest(ctx, http.MethodGet, "default/y", "/", nil))
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				err = fmt.Errorf("answered %d", resp.StatusCode)
			}
		}
		first <- err
	}()
	in.waitQueued("y", queued)

	three := in.parkedLogged(3)
	joined := make(chan reply, 2)
	for range 2 {
		go func() { joined <- in.getReply("default/y", "/") }()
	}
	waitFor(t, "clients 2 and 3 to park with client 1", 30*time.Second, func() bool { return in.parkedLogged(3) > three })
	cancel()
	if err := <-first; err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("client 1 after leaving: %v, want its context canceled", err)
	}
	if a := in.actor("y"); a.GetResumes() != before || a.GetState() == atev1.ActorState_RUNNING {
		t.Fatalf("y was %s after %d resumes when client 1 left; the scenario needs its resume still waiting", a.GetState(), a.GetResumes())
	}

	counts := map[string]bool{}
	for range 2 {
		r := <-joined
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("joined request: %d %q %v, want 200", r.code, r.body, r.err)
		}
		t.Logf("joined request: %s, Ate-Activation %q after %s ms", r.body, r.header.Get("Ate-Activation"), r.header.Get("Ate-Activation-Ms"))
		if act := r.header.Get("Ate-Activation"); act != `joined;evicted` {
			t.Errorf("joined request: Ate-Activation %q, want joined;evicted (the shared resume that client 1 started)", act)
		}
		counts[r.body] = true
	}
	if !counts["count=1"] || !counts["count=2"] {
		t.Errorf("joined requests saw %v, want count=1 and count=2", counts)
	}
	if s := <-slow; s.err != nil || s.code != http.StatusOK {
		t.Fatalf("x's slow request: %d %q %v", s.code, s.body, s.err)
	}
	if got := in.actor("y").GetResumes(); got != before+1 {
		t.Errorf("y's resumes went from %d to %d, want exactly one restore", before, got)
	}
	in.wantEvicted("x", "y")
}
