package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"substrate.dev/ate/internal/loadgen"
	"substrate.dev/ate/internal/netns"
	"substrate.dev/ate/internal/sandbox"
)

// CPUs of BenchmarkRouterPerCore: the router alone on one, everything
// else on the other.
const perCoreRouterCPU, perCoreLoadCPU = 0, 1

// BenchmarkRouterPerCore measures `ate router` the way proxies are
// compared: the router runs as its own process (ate router --api, as in
// a cluster) pinned to CPU 0; `ate up` (API server, node, worker tunnel),
// the counter actor's runsc sandbox and this test's load generator are
// pinned to CPU 1. 64 keep-alive connections, GET / ("count=N\n").
// loadgen.Comparison runs the router side (router → tunnel → sandbox)
// and the direct side (the sandbox's server from the worker's network
// namespace, as the tunnel dials it) closed-loop for throughput, then
// paced at half the lower rate for added latency.
// router-req/s-per-core is the router's rate over the CPU time its
// process used; allocs/req and B/req its heap allocations per request
// (go_memstats from its /metrics). A second or so per run; 10 s under
// fullBench. The same measurement with the actor as a plain process,
// showing the router's own cost, is internal/router's
// BenchmarkRouterPerCorePlainActor.
func BenchmarkRouterPerCore(b *testing.B) {
	in := startUp(b, 1, "--demo")
	in.mustCount("default/counter-1", 1)
	mgmt := freeAddr(b)
	// One core, one P: as Go sizes itself in a deployment with a 1-CPU
	// limit. With the default (2 here) two Ps share the pinned core and
	// spin and hand work over between them.
	b.Setenv("GOMAXPROCS", "1")
	rt, fields := startComponent(b, "router", "ate router ready", "router", "--api", in.apiAddr,
		"--listen", "127.0.0.1:0", "--drain-delay", "0s", "--management-addr", mgmt,
		// A router of this installation: its certificate from ate up's CA.
		"--tls-dir", issueCert(b, filepath.Join(in.dataDir, "pki"), "router", "percore"))
	routerAddr := fields["router"].(string)

	for _, p := range []struct {
		pid     int
		cpu     int
		process string
	}{{os.Getpid(), perCoreLoadCPU, "test"}, {in.pid(), perCoreLoadCPU, "ate up"}, {rt.cmd.Process.Pid, perCoreRouterCPU, "ate router"}} {
		restore, err := loadgen.PinTree(p.pid, p.cpu)
		if err != nil {
			b.Fatalf("pin %s: %v", p.process, err)
		}
		b.Cleanup(restore)
	}

	nsPath := netns.SlotFor(in.actor("counter-1").GetWorker()).DialNetNSPath
	interior := net.JoinHostPort(sandbox.InteriorAddr, "8080")
	cmp := loadgen.Comparison{
		Proxy: loadgen.Side{
			Dial: func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", routerAddr)
			},
			Request: loadgen.NewRequest(routerAddr, "/", "Ate-Target-Actor: default/counter-1"),
		},
		Direct: loadgen.Side{
			Dial: func(ctx context.Context) (net.Conn, error) {
				return netns.DialContext(ctx, nsPath, "tcp", interior)
			},
			Request: loadgen.NewRequest(interior, "/"),
		},
		Conns: loadgen.Conns, Window: loadgen.Window(fullBench()),
		ProxyCPU: func() (time.Duration, error) {
			// Pin the router's threads started since (the Go runtime
			// adds some under load) too.
			if _, err := loadgen.Pin(rt.cmd.Process.Pid, perCoreRouterCPU); err != nil {
				return 0, err
			}
			return loadgen.CPUTime(rt.cmd.Process.Pid)
		},
		ProxyAllocs: func() (float64, float64, error) { return goAllocs(mgmt) },
	}
	cmp.Bench(b, "router")
}

// goAllocs reads a Go process's heap allocations so far, objects and
// bytes, from the go_memstats counters of its /metrics at addr.
func goAllocs(addr string) (objects, bytes float64, err error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("parse /metrics of %s: %w", addr, err)
	}
	value := func(name string) (float64, error) {
		ms := fams[name].GetMetric()
		if len(ms) != 1 {
			return 0, fmt.Errorf("/metrics of %s: %d series %s, want 1", addr, len(ms), name)
		}
		return ms[0].GetCounter().GetValue(), nil
	}
	if objects, err = value("go_memstats_mallocs_total"); err != nil {
		return 0, 0, err
	}
	bytes, err = value("go_memstats_alloc_bytes_total")
	return objects, bytes, err
}
