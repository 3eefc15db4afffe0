package cluster

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startedCalls sums each gRPC method's grpc_server_started_total on the
// API server replica at ip (its own /metrics): the calls it served.
func startedCalls(ip string) (map[string]float64, error) {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + ip + ":9090/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "grpc_server_started_total{") {
			continue
		}
		i := strings.Index(line, `grpc_method="`)
		rest := line[i+len(`grpc_method="`):]
		method := rest[:strings.IndexByte(rest, '"')]
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			out[method] += v
		}
	}
	return out, sc.Err()
}

// readyAPIAddresses are the ready endpoints of Service ate-apiserver's
// EndpointSlices.
func readyAPIAddresses(ctx context.Context) ([]string, error) {
	out, err := kc.kubectl(ctx, "-n", ns, "get", "endpointslices", "-l", "kubernetes.io/service-name=ate-apiserver", "-o",
		`jsonpath={range .items[*].endpoints[*]}{.addresses[0]} {.conditions.ready}{"\n"}{end}`)
	if err != nil {
		return nil, err
	}
	var ready []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] == "true" {
			ready = append(ready, f[0])
		}
	}
	return ready, nil
}

// testAPIScaleOut: scaled from 2 to 4 replicas, the API server's
// EndpointSlice shows 4 ready endpoints and, within seconds, every new
// replica's own call counters show the nodes (Register), the router
// (GetActor, RecordActivity, ResumeActor) and the controller (ListWorkers)
// calling it — the clients found them through the EndpointSlices, none
// was restarted; scaled back to 2 under load, no request fails.
func testAPIScaleOut(t *testing.T, ctx context.Context, in *install) {
	before, err := readyAPIAddresses(ctx)
	if err != nil || len(before) != 2 {
		t.Fatalf("ready API endpoints before: %v %v, want 2", before, err)
	}
	// The clients (router, controller, worker Pods) by Pod name, with
	// their restart counts: the same after the scale-out.
	restarts := func() string {
		out, _ := kc.kubectl(ctx, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/component!=apiserver", "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.status.containerStatuses[0].restartCount} {end}`)
		return out
	}
	restartsBefore := restarts()
	actors := []string{"default/p1", "default/p2", "default/p3", "default/p4", "default/p5"}
	l, err := startLoad(ctx, 20, actors)
	if err != nil {
		t.Fatal(err)
	}
	defer l.finish()
	if _, err := kc.kubectl(ctx, "-n", ns, "scale", "deployment/ate-apiserver", "--replicas=4"); err != nil {
		t.Fatal(err)
	}
	var four []string
	if err := kc.waitFor("4 ready API endpoints", 2*time.Minute, func() error {
		four, err = readyAPIAddresses(ctx)
		if err == nil && len(four) != 4 {
			err = fmt.Errorf("ready %v", four)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	scaled := time.Now()
	callers := map[string][]string{
		"nodes":      {"Register"},
		"router":     {"GetActor", "RecordActivity", "ResumeActor"},
		"controller": {"ListWorkers"},
	}
	for _, ip := range four {
		if err := kc.waitFor("replica "+ip+" called by nodes, router and controller", time.Minute, func() error {
			calls, err := startedCalls(ip)
			if err != nil {
				return err
			}
			for who, methods := range callers {
				var n float64
				for _, m := range methods {
					n += calls[m]
				}
				if n == 0 {
					return fmt.Errorf("no call from the %s yet (%v)", who, calls)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("all 4 replicas called by nodes, router and controller %s after the 4th was ready", time.Since(scaled).Round(time.Second))
	if now := restarts(); now != restartsBefore {
		t.Fatalf("a client Pod was restarted or replaced while the API scaled out: %s, before %s", now, restartsBefore)
	}
	if _, err := kc.kubectl(ctx, "-n", ns, "scale", "deployment/ate-apiserver", "--replicas=2"); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, "ate-apiserver")
	if err := kc.waitFor("2 ready API endpoints", 2*time.Minute, func() error {
		two, err := readyAPIAddresses(ctx)
		if err == nil && len(two) != 2 {
			err = fmt.Errorf("ready %v", two)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Requests keep flowing for a while on the two that remain.
	select {
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	sent, ok, failures := l.finish()
	t.Logf("API scale out and in under load: %d requests, %d ok", sent, ok)
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed while the API scaled:\n%s", len(failures), sent, summary(failures))
	}
}

// testAPIRollingRestart: `kubectl rollout restart` of the API server
// under 20 requests/s over 5 actors while another actor, suspended by its
// idle policy after each request, is woken every 3 s: no request fails,
// wake-ups go on through the restart, and afterwards no actor is wedged
// (each is RUNNING or SUSPENDED and answers).
func testAPIRollingRestart(t *testing.T, ctx context.Context, in *install, dir string) {
	if err := writeAndCreateTemplate(ctx, in, dir, "sleepy",
		// Suspended by the router 1 s after each request: the next wakes it.
		counterTemplateYAML("sleepy", "1s", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ate(ctx, "create", "actor", "w1", "--template", "sleepy"); err != nil {
		t.Fatal(err)
	}
	actors := []string{"default/p1", "default/p2", "default/p3", "default/p4", "default/p5"}
	l, err := startLoad(ctx, 20, actors)
	if err != nil {
		t.Fatal(err)
	}
	defer l.finish()
	began := time.Now()
	wakeups := 0
	var wakeFailures []string
	stopWaking := make(chan struct{})
	waker := make(chan struct{})
	go func() {
		defer close(waker)
		u, err := routerURL(ctx)
		if err != nil {
			wakeFailures = append(wakeFailures, err.Error())
			return
		}
		tick := time.NewTicker(3 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopWaking:
				return
			case <-tick.C:
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			req.Header.Set("ate-target-actor", "default/w1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				wakeFailures = append(wakeFailures, err.Error())
				continue
			}
			resp.Body.Close()
			switch {
			case resp.StatusCode != http.StatusOK:
				wakeFailures = append(wakeFailures, fmt.Sprintf("%s %s", time.Now().Format("15:04:05.000"), resp.Status))
			case resp.Header.Get("Ate-Activation") == "resumed":
				wakeups++
			}
		}
	}()
	if _, err := kc.kubectl(ctx, "-n", ns, "rollout", "restart", "deployment/ate-apiserver"); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, "ate-apiserver")
	if rest := 60*time.Second - time.Since(began); rest > 0 {
		select {
		case <-time.After(rest):
		case <-ctx.Done():
		}
	}
	close(stopWaking)
	<-waker
	sent, ok, failures := l.finish()
	t.Logf("API rolling restart under load: %d requests, %d ok; %d wake-ups of an idle-suspended actor", sent, ok, wakeups)
	failures = append(failures, wakeFailures...)
	if len(failures) > 0 || wakeups < 5 {
		t.Fatalf("%d requests failed during the API server's rolling restart, %d wake-ups (want ≥5):\n%s", len(failures), wakeups, summary(failures))
	}
	out, err := in.ate(ctx, "get", "actors")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 4 && f[3] != "RUNNING" && f[3] != "SUSPENDED" {
			t.Errorf("actor %s/%s is %s after the restart, want RUNNING or SUSPENDED", f[0], f[1], f[3])
		}
	}
	for _, a := range actors {
		if code, body, err := get(ctx, a); err != nil || code != http.StatusOK {
			t.Errorf("%s after the restart: %d %q %v", a, code, body, err)
		}
	}
}
