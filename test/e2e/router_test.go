package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// reply is one response read to the end, with when it arrived.
type reply struct {
	code   int
	body   string
	header http.Header
	err    error
	at     time.Time
}

// getReply sends a GET of path to actor and returns its reply, body
// trimmed, stamped with when it came; safe to call from any goroutine.
func (in *installation) getReply(actor, path string) reply {
	code, body, hdr, err := in.request(http.MethodGet, actor, path, "")
	return reply{code: code, body: strings.TrimSpace(body), header: hdr, err: err, at: time.Now()}
}

// burst sends n concurrent GETs of path to actor and returns the replies.
func (in *installation) burst(n int, actor, path string) []reply {
	out := make([]reply, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			out[i] = in.getReply(actor, path)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// TestRouterBurstFromZero sends 500 concurrent requests to a suspended
// actor: exactly one restore, every request answered 200 with its own
// count, one of them "resumed" and the rest "joined" (or "warm" for any
// that arrived after the resume), each waiting one with its wait in
// Ate-Activation-Ms.
func TestRouterBurstFromZero(t *testing.T) {
	const n = 500
	in := startUp(t, 2, "--demo")
	in.mustCount("default/counter-1", 1)
	in.suspend("counter-1")
	before := in.actor("counter-1").GetResumes()

	replies := in.burst(n, "default/counter-1", "/")
	seen := map[string]bool{}
	activations := map[string]int{}
	for i, r := range replies {
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("request %d: %d %q %v", i, r.code, r.body, r.err)
		}
		if seen[r.body] {
			t.Fatalf("two requests got %q", r.body)
		}
		seen[r.body] = true
		act := r.header.Get("Ate-Activation")
		activations[act]++
		if ms := r.header.Get("Ate-Activation-Ms"); act != "warm" {
			if _, err := strconv.Atoi(ms); err != nil {
				t.Errorf("%s reply without Ate-Activation-Ms: %q", act, ms)
			}
		}
	}
	for c := 2; c <= n+1; c++ {
		if !seen[fmt.Sprintf("count=%d", c)] {
			t.Fatalf("no request saw count=%d", c)
		}
	}
	if activations["resumed"] != 1 || activations["joined"]+activations["warm"] != n-1 {
		t.Errorf("activations %v, want 1 resumed and the rest joined or warm", activations)
	}
	if got := in.actor("counter-1").GetResumes(); got != before+1 {
		t.Errorf("resumes went from %d to %d, want exactly one restore", before, got)
	}
}

// TestRouterParking: with the only worker busy, requests for a suspended
// actor park; one beyond --park-max is refused at once, parked ones are
// refused when --park-budget runs out — each 503 with Retry-After and the
// reason — and parked requests are served as soon as a worker frees.
func TestRouterParking(t *testing.T) {
	const lot, budget = 5, 2 * time.Second
	in := startUp(t, 1, "--park-max", fmt.Sprint(lot), "--park-budget", budget.String())
	// "busy" must keep the only worker until the test frees it.
	in.pinnedCounterTemplate("counter")
	for _, name := range []string{"busy", "waiter"} {
		in.ate("create", "actor", name, "--template", "counter")
	}
	in.mustCount("default/busy", 1)

	park := func(round int) (<-chan reply, time.Time) {
		out := make(chan reply, lot)
		for range lot {
			go func() {
				out <- in.getReply("default/waiter", "/")
			}()
		}
		waitFor(t, fmt.Sprintf("%d requests parked (round %d)", lot, round), 30*time.Second,
			func() bool { return in.parkedLogged(lot) == round })
		return out, time.Now()
	}

	parked, since := park(1)
	code, body, hdr, err := in.request(http.MethodGet, "default/waiter", "/", "")
	if err != nil || code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" ||
		!strings.Contains(body, "parking lot full") || !strings.Contains(body, fmt.Sprintf("limit %d", lot)) {
		t.Fatalf("request beyond the lot: %d %q Retry-After %q %v; want 503 naming the limit", code, body, hdr.Get("Retry-After"), err)
	}
	for range lot {
		r := <-parked
		if r.code != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" ||
			!strings.Contains(r.body, "park budget of 2s exhausted") {
			t.Fatalf("parked request with no worker free: %d %q Retry-After %q %v; want 503 naming the budget",
				r.code, r.body, r.header.Get("Retry-After"), r.err)
		}
		if waited := r.at.Sub(since); waited > budget+5*time.Second {
			t.Errorf("answered %s after parking, want about the budget (%s)", waited, budget)
		}
	}

	parked, _ = park(2)
	freed := time.Now()
	in.suspend("busy")
	counts := map[string]bool{}
	for range lot {
		r := <-parked
		if r.code != http.StatusOK || r.at.Before(freed) {
			t.Fatalf("parked request: %d %q %v at %s (worker freed at %s), want 200 after the worker freed",
				r.code, r.body, r.err, r.at.Format(time.StampMilli), freed.Format(time.StampMilli))
		}
		counts[r.body] = true
	}
	if len(counts) != lot {
		t.Errorf("parked requests saw %v, want %d distinct counts", counts, lot)
	}
}

// TestRouterWaitsForWakeupProbe: traffic reaches a restored actor only
// once its wakeup probe passes. One template's app answers its HTTP probe
// (/ready) 503 for 1.5 s after a restore, the other listens only 1.5 s
// after a cold boot and has no probe (TCP connect to its port); in both
// the first request after a resume is answered by a ready actor, after
// waiting at least that long. A third template probes after a boot only
// (afterRestore: skip): the request that wakes it, from its golden
// snapshot or its own, reaches the app at once, which is still warming up
// for 30 s and says so.
func TestRouterWaitsForWakeupProbe(t *testing.T) {
	const warmup = 1500 * time.Millisecond
	in := startUp(t, 2)
	in.counterTemplate("ready-http", map[string]string{"WARMUP_MS": "1500", "RESTORE_GAP_MS": "300"},
		"wakeupProbe:\n  httpGet: {path: /ready, port: 8080}\n")
	// Data scope: a resume after suspend cold-boots the image.
	in.counterTemplate("ready-tcp", map[string]string{"LISTEN_DELAY_MS": "1500"},
		"snapshotPolicy: {onSuspend: Data}\n")
	in.counterTemplate("ready-skip", map[string]string{"WARMUP_MS": "30000", "RESTORE_GAP_MS": "300"},
		"wakeupProbe:\n  httpGet: {path: /ready, port: 8080}\n  afterRestore: skip\n")
	built := time.Now()

	tests := []struct {
		template, path string
		code           int
		want           string
		waited         bool // the activation waited for the warm-up
	}{
		{"ready-http", "/warm", http.StatusOK, "ready", true},
		{"ready-tcp", "/", http.StatusOK, "count=1", true},
		{"ready-skip", "/warm", http.StatusServiceUnavailable, "warming up", false},
	}
	for _, tt := range tests {
		t.Run(tt.template, func(t *testing.T) {
			actor := tt.template + "-1"
			in.ate("create", "actor", actor, "--template", tt.template)
			// The first request restores the golden snapshot: once that
			// has aged past RESTORE_GAP_MS, the app warms up after it too.
			elapsedAtLeast(t, "the golden snapshots to age", built, 600*time.Millisecond)
			if code, body := in.get("default/"+actor, tt.path); code != tt.code || strings.TrimSpace(body) != tt.want {
				t.Fatalf("first request: %d %q, want %d %q", code, body, tt.code, tt.want)
			}
			in.suspend(actor)
			// The restored app notices it was frozen by its wall clock
			// jumping more than RESTORE_GAP_MS.
			elapsedAtLeast(t, "the actor to stay suspended a while", time.Now(), 600*time.Millisecond)
			code, body, hdr, err := in.request(http.MethodGet, "default/"+actor, tt.path, "")
			if err != nil || code != tt.code || strings.TrimSpace(body) != tt.want {
				t.Fatalf("request after resume: %d %q %v, want %d %q", code, body, err, tt.code, tt.want)
			}
			ms, err := strconv.Atoi(hdr.Get("Ate-Activation-Ms"))
			if hdr.Get("Ate-Activation") != "resumed" || err != nil {
				t.Fatalf("activation %q after %q ms, want resumed", hdr.Get("Ate-Activation"), hdr.Get("Ate-Activation-Ms"))
			}
			if tt.waited && time.Duration(ms)*time.Millisecond < warmup {
				t.Errorf("activation after %d ms, want at least %s", ms, warmup)
			}
			if s := in.state(actor); s != atev1.ActorState_RUNNING {
				t.Errorf("%s is %s after the request, want RUNNING", actor, s)
			}
		})
	}
}
