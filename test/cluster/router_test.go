package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// onePod is the name and IP of the only Running, not terminating Pod of
// the component (app.kubernetes.io/component).
func onePod(ctx context.Context, component string) (name, ip string, err error) {
	out, err := kc.kubectl(ctx, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/component="+component, "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.status.phase} {.metadata.deletionTimestamp}{"\n"}{end}`)
	if err != nil {
		return "", "", err
	}
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[2] == "Running" {
			found = append(found, line)
			name, ip = f[0], f[1]
		}
	}
	if len(found) != 1 {
		return "", "", fmt.Errorf("want one running %s Pod, have %q", component, out)
	}
	return name, ip, nil
}

// metricValue is the value of the unlabelled metric name at url (a
// Prometheus text endpoint); -1 when it cannot be read.
func metricValue(url, name string) float64 {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}

func httpStatus(url string) int {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// testRouterPodReplaced: with every worker held by a pinned actor, a
// request to a suspended actor parks in the router; the router Pod is
// deleted; while Terminating it answers /readyz 503 and /healthz 200, and
// serves the parked request 200 once a worker frees; it is gone well
// before its grace period (so never SIGKILLed). Then a rolling update of
// the router Deployment under 20 requests/s for 60 s over 5 actors fails
// no request.
func testRouterPodReplaced(t *testing.T, ctx context.Context, in *install, dir string) {
	for _, a := range []string{"counter-1", "counter-2"} {
		if _, err := in.ate(ctx, "suspend", "actor", a); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeAndCreateTemplate(ctx, in, dir, "pinned",
		// Never evicted to make room: with every worker held by one, a
		// request to another actor parks.
		counterTemplateYAML("pinned", "10m", "eviction: {evictable: false}\n")); err != nil {
		t.Fatal(err)
	}
	var pinned []string
	for i := 1; i <= 6; i++ { // 3 worker Pods × 2 workers
		name := fmt.Sprintf("p%d", i)
		if _, err := in.ate(ctx, "create", "actor", name, "--template", "pinned"); err != nil {
			t.Fatal(err)
		}
		in.hit(t, ctx, "default/"+name)
		pinned = append(pinned, "default/"+name)
	}
	router, routerIP, err := onePod(ctx, "router")
	if err != nil {
		t.Fatal(err)
	}
	type reply struct {
		code int
		body string
		err  error
	}
	parked := make(chan reply, 1)
	go func() {
		code, body, err := get(ctx, "default/counter-1")
		parked <- reply{code, body, err}
	}()
	if err := kc.waitFor("the request to counter-1 parked", time.Minute, func() error {
		if n := metricValue("http://"+routerIP+":9090/metrics", "ate_router_parked_requests"); n != 1 {
			return fmt.Errorf("ate_router_parked_requests %v", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if _, err := kc.kubectl(ctx, "-n", ns, "delete", "pod", router, "--wait=false"); err != nil {
		t.Fatal(err)
	}
	if err := kc.waitFor("the terminating router's /readyz 503", 20*time.Second, func() error {
		if c := httpStatus("http://" + routerIP + ":9090/readyz"); c != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d", c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if c := httpStatus("http://" + routerIP + ":9090/healthz"); c != http.StatusOK {
		t.Fatalf("the terminating router's /healthz: %d, want 200", c)
	}
	select {
	case r := <-parked:
		t.Fatalf("the parked request ended before a worker was freed: %+v", r)
	default:
	}
	if _, err := in.ate(ctx, "suspend", "actor", "p6"); err != nil {
		t.Fatal(err)
	}
	r := <-parked
	if r.err != nil || r.code != http.StatusOK || r.body != fmt.Sprintf("count=%d", in.counts["default/counter-1"]+1) {
		t.Fatalf("parked request: %d %q %v, want 200 count=%d", r.code, r.body, r.err, in.counts["default/counter-1"]+1)
	}
	in.counts["default/counter-1"]++
	if _, err := kc.kubectl(ctx, "-n", ns, "wait", "--for=delete", "pod/"+router, "--timeout=90s"); err != nil {
		t.Fatal(err)
	}
	// The grace is drainDelay 5 s + drainTimeout 40 s + margin 15 s = 60 s (the chart's defaults): the
	// kubelet SIGKILLs only at its end.
	if gone := time.Since(deleted); gone > 30*time.Second {
		t.Fatalf("the router Pod took %s to go: it did not leave once drained", gone)
	}
	waitRollout(t, ctx, "ate-router")

	// A rolling update under steady load.
	l, err := startLoad(ctx, 20, pinned[:5])
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if _, err := kc.kubectl(ctx, "-n", ns, "rollout", "restart", "deployment/ate-router"); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, "ate-router")
	if rest := 60*time.Second - time.Since(began); rest > 0 {
		select {
		case <-time.After(rest):
		case <-ctx.Done():
		}
	}
	sent, ok, failures := l.finish()
	t.Logf("router rolling update under load: %d requests, %d ok", sent, ok)
	if len(failures) > 0 || sent < 1000 {
		t.Fatalf("%d of %d requests failed during the router's rolling update:\n%s", len(failures), sent, summary(failures))
	}
}
