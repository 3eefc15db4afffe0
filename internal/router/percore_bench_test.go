package router

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"runtime"
	rpprof "runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/loadgen"
	"substrate.dev/ate/internal/logbuf"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/names"
)

// benchRouterEnv, set to a backend's host:port, makes the test binary
// the router process of BenchmarkRouterPerCorePlainActor instead of
// running tests.
const benchRouterEnv = "ATE_ROUTER_BENCH_BACKEND"

// Router and generator CPUs of BenchmarkRouterPerCorePlainActor.
const benchRouterCPU, benchLoadCPU = 0, 1

// BenchmarkRouterPerCorePlainActor measures the router's own cost per
// core, the way proxies are compared: the router is its own process
// pinned to CPU 0 (NewHandler on httpserve, JSON access log batched to a
// file, metrics on — as `ate router` runs), and a plain-process actor (a Go HTTP server
// standing in for tunnel and app, answering "count=N\n") and the load
// generator share CPU 1. 64 keep-alive connections, small responses.
//
// loadgen.Comparison runs both sides (router, direct to the actor):
// closed-loop for throughput, router-req/s-per-core dividing the router's
// by the CPU time its process used; then both paced at half the lower
// throughput, back to back, for added-p50/p99-ms (router minus direct);
// allocs/req and B/req are the router process's heap allocations per
// request over its closed-loop run.
func BenchmarkRouterPerCorePlainActor(b *testing.B) { benchPerCore(b, "") }

// BenchmarkRouterPerCoreIngressToken is BenchmarkRouterPerCorePlainActor
// with every actor's ingress policy "token" (ingress.go): each request
// carries Authorization: Bearer <token> (the direct side's too, so both
// send the same bytes), and the router checks it against its review
// cache before proxying (the control plane's review is cached after the
// first request, as on any warm path; it stays fresh for the whole run
// as the TTL is longer than it). Its added-p50-ms / added-p99-ms minus
// BenchmarkRouterPerCorePlainActor's are the token check's added
// latency on warm requests; allocs/req and B/req its allocations.
func BenchmarkRouterPerCoreIngressToken(b *testing.B) {
	benchPerCore(b, "Authorization: Bearer "+benchIngressToken)
}

// benchIngressToken is the token the router process of
// BenchmarkRouterPerCoreIngressToken accepts.
const benchIngressToken = "ate_it_benchbenchbenchbenchbenchbenchbenchbenchben"

// benchPerCore runs a per-core benchmark; header, when set, is sent on
// every request and puts the router process in token-ingress mode.
func benchPerCore(b *testing.B, header string) {
	restore, err := loadgen.Pin(os.Getpid(), benchLoadCPU)
	if err != nil {
		b.Fatal(err)
	}
	defer restore()
	backend := benchBackend(b)
	var headers []string
	if header != "" {
		headers = append(headers, header)
	}
	rt := startBenchRouter(b, backend, header != "")
	dial := func(addr string) func(ctx context.Context) (net.Conn, error) {
		return func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	req := loadgen.NewRequest("counter.default."+DefaultActorDomain, "/", headers...)
	cmp := loadgen.Comparison{
		Proxy:  loadgen.Side{Dial: dial(rt.addr), Request: req},
		Direct: loadgen.Side{Dial: dial(backend), Request: req},
		Conns:  loadgen.Conns, Window: loadgen.Window(fullBench()),
		ProxyCPU:    func() (time.Duration, error) { return loadgen.CPUTime(rt.pid) },
		ProxyAllocs: rt.allocs,
	}
	cmp.Bench(b, "router")
}

// benchBackend starts the plain-process actor of
// BenchmarkRouterPerCorePlainActor and returns its host:port.
func benchBackend(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var count atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "count=%d\n", count.Add(1))
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// benchRouter is the router process of BenchmarkRouterPerCorePlainActor.
type benchRouter struct {
	pid         int
	addr, stats string
}

// startBenchRouter runs this test binary as a router (runBenchRouter)
// pinned to benchRouterCPU, in front of backend; with token, its actors'
// ingress policy is "token" (benchIngressEnv).
func startBenchRouter(b *testing.B, backend string, token bool) *benchRouter {
	logf, err := os.Create(b.TempDir() + "/router.log")
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	// taskset pins from the first instruction, before the Go runtime
	// starts threads. GOGC as `ate router` sets it (up.DefaultGCPercent).
	cmd := exec.Command("taskset", "-c", fmt.Sprint(benchRouterCPU), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchRouterEnv+"="+backend, "GOGC=400")
	if token {
		cmd.Env = append(cmd.Env, benchIngressEnv+"=token")
	}
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close() // the router exits at EOF
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("router process: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		b.Fatalf("router process said %q, want its two addresses", line)
	}
	return &benchRouter{pid: cmd.Process.Pid, addr: f[0], stats: f[1]}
}

// allocs returns the router process's heap allocations so far: objects
// and bytes.
func (r *benchRouter) allocs() (objects, bytes float64, err error) {
	resp, err := http.Get("http://" + r.stats + "/memstats")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var m runtime.MemStats
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return 0, 0, err
	}
	return float64(m.Mallocs), float64(m.TotalAlloc), nil
}

// runBenchRouter is the router process: the handler NewHandler builds,
// served by httpserve, every actor on backend, logging JSON at info to
// stderr (batched as `ate router` does). It prints its router and stats addresses on one line and runs
// until stdin ends. The stats listener serves /memstats and pprof
// (/debug/pprof/…), for profiling the router under the benchmark's load.
func runBenchRouter(backend string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Logging as componentCommand (cmd/ate) sets it up.
	out := logbuf.NewWriter(os.Stderr, 100*time.Millisecond)
	defer out.Flush()
	jh := slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo})
	logger := slog.New(logbuf.NewHandler(jh, out, IsAccessRecord))
	var res Resolver = staticResolver{worker: "worker-1", addr: backend}
	if os.Getenv(benchIngressEnv) == "token" {
		res = tokenResolver{staticResolver: res.(staticResolver), token: benchIngressToken}
	}
	// The review cache's TTL outlasts the run, as a token in steady use
	// is reviewed again only once per TTL.
	h := NewHandler(Config{Metrics: metrics.New().Router, IngressCacheTTL: time.Hour}, res, logger)
	srv := httpserve.NewServer("router", "127.0.0.1:0", h, logger)
	if err := srv.Listen(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() { _ = srv.Start(ctx) }()
	go func() { _ = h.Start(ctx) }()
	stats, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/memstats", func(w http.ResponseWriter, _ *http.Request) {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		_ = json.NewEncoder(w).Encode(&m)
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go func() { _ = http.Serve(stats, mux) }()
	if dir := os.Getenv(benchProfileEnv); dir != "" {
		stop, err := profile(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer stop()
	}
	fmt.Printf("%s %s\n", srv.Addr(), stats.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// benchProfileEnv names a directory where the router process of
// BenchmarkRouterPerCorePlainActor writes cpu.pprof (its whole run)
// and allocs.pprof (at exit).
const benchProfileEnv = "ATE_ROUTER_BENCH_PROFILE"

func profile(dir string) (stop func(), err error) {
	cpu, err := os.Create(dir + "/cpu.pprof")
	if err != nil {
		return nil, err
	}
	if err := rpprof.StartCPUProfile(cpu); err != nil {
		return nil, err
	}
	return func() {
		rpprof.StopCPUProfile()
		_ = cpu.Close()
		if f, err := os.Create(dir + "/allocs.pprof"); err == nil {
			_ = rpprof.Lookup("allocs").WriteTo(f, 0)
			_ = f.Close()
		}
	}, nil
}

// benchIngressEnv, set to "token", gives the router process's actors
// ingress policy token (BenchmarkRouterPerCoreIngressToken).
const benchIngressEnv = "ATE_ROUTER_BENCH_INGRESS"

// tokenResolver is staticResolver with every actor's ingress policy
// "token", accepting token alone.
type tokenResolver struct {
	staticResolver
	token string
}

func (s tokenResolver) Lookup(ctx context.Context, key names.ActorKey) (Target, bool, error) {
	t, ok, err := s.staticResolver.Lookup(ctx, key)
	t.Policy.Ingress = auth.IngressToken
	return t, ok, err
}

func (s tokenResolver) Resume(ctx context.Context, key names.ActorKey) (Target, Resumption, error) {
	t, r, err := s.staticResolver.Resume(ctx, key)
	t.Policy.Ingress = auth.IngressToken
	return t, r, err
}

func (s tokenResolver) ReviewIngress(_ context.Context, atespace, token string) (IngressReview, error) {
	if token != s.token {
		return IngressReview{}, nil
	}
	return IngressReview{Allowed: true, Subject: "ingresstoken:" + atespace + "/bench"}, nil
}

// staticResolver places every actor, RUNNING, on one worker whose tunnel
// is addr.
type staticResolver struct{ worker, addr string }

func (s staticResolver) Lookup(_ context.Context, key names.ActorKey) (Target, bool, error) {
	return targetAt(key, s.worker, s.addr), true, nil
}

func (s staticResolver) Resume(_ context.Context, key names.ActorKey) (Target, Resumption, error) {
	return targetAt(key, s.worker, s.addr), Resumption{}, nil
}

func (s staticResolver) Assigned(context.Context, names.ActorKey) (bool, error) { return true, nil }

func fullBench() bool { return os.Getenv("ATE_BENCH_SCALE") == "full" }
