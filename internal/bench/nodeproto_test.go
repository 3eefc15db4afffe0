package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/latency"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/store/postgres/pgtest"
	"substrate.dev/ate/internal/up"
)

// envNode, when set in a process running this test binary, makes it an
// `ate node --sandbox-class fake` (runNodeChild) configured by the JSON
// nodeSpec in the variable's value, instead of running tests: the node
// processes of BenchmarkNodeProtocol.
const envNode = "ATE_BENCH_NODE"

// nodeSpec is what a node child runs with.
type nodeSpec struct {
	Name, API, DataDir, Snapshots string
	Workers                       int
}

// runNodeChild runs the node of the JSON nodeSpec spec until SIGTERM, as
// `ate node` does (up.RunNode, its collector target), and returns the
// process's exit code.
func runNodeChild(spec string) int {
	var s nodeSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", envNode, err)
		return 2
	}
	up.TuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := up.RunNode(ctx, up.NodeAgentConfig{TLS: pki.Settings{Insecure: true}, DataDir: s.DataDir, API: s.API, Snapshots: s.Snapshots,
		Node: node.Config{Name: s.Name, Workers: s.Workers, SandboxClass: fake.Class}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "node %s: %v\n", s.Name, err)
		return 1
	}
	return 0
}

// nodeProc is a node child process.
type nodeProc struct {
	name string
	cmd  *exec.Cmd
	done chan error // receives Wait's result
}

// startNode starts a node child of spec. It dies with the benchmark
// (a parent-death signal) if Close is never reached.
func startNode(tb testing.TB, spec nodeSpec) *nodeProc {
	tb.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		tb.Fatal(err)
	}
	p := &nodeProc{name: spec.Name, done: make(chan error, 1)}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), envNode+"="+string(raw))
	p.cmd.Stderr = os.Stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal follows the forking thread: keep it
		// for the child's life.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.done <- p.cmd.Wait()
	}()
	if err := <-started; err != nil {
		tb.Fatalf("start node %s: %v", spec.Name, err)
	}
	return p
}

// stop asks the node to drain and leave (SIGTERM) and waits for it.
func (p *nodeProc) stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-p.done:
		if err != nil {
			return fmt.Errorf("node %s: %w", p.name, err)
		}
		return nil
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("node %s did not stop within a minute of SIGTERM", p.name)
	}
}

// cpu is the CPU time (user and system) the node has used so far, from
// /proc/<pid>/stat.
func (p *nodeProc) cpu() (time.Duration, error) {
	return procCPU(p.cmd.Process.Pid)
}

// procCPU reads a process's user and system time from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	st, err := readProcStat(pid)
	return st.cpu, err
}

// procStat is what the bench reads of /proc/<pid>/stat.
type procStat struct {
	ppid int
	// cpu is the process's user and system time; waited its children's
	// that it has waited for.
	cpu, waited time.Duration
}

func readProcStat(pid int) (procStat, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// Fields after the command name (in parentheses, which may hold
	// spaces): state is field 3, ppid 4, utime 14, stime 15, cutime 16,
	// cstime 17.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var n [5]int64
	for i, v := range []string{f[1], f[11], f[12], f[13], f[14]} {
		if n[i], err = strconv.ParseInt(v, 10, 64); err != nil {
			return procStat{}, err
		}
	}
	// USER_HZ is 100 on every Linux Go supports.
	const tick = 10 * time.Millisecond
	return procStat{ppid: int(n[0]), cpu: time.Duration(n[1]+n[2]) * tick, waited: time.Duration(n[3]+n[4]) * tick}, nil
}

// pgCPU is the CPU time the PostgreSQL server behind url has used so
// far: its postmaster's, the children it has waited for, and every child
// still running (backends, WAL writer, checkpointer...). It must run on
// this machine.
func pgCPU(ctx context.Context, url string) (time.Duration, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var backend int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return 0, err
	}
	self, err := readProcStat(backend)
	if err != nil {
		return 0, err
	}
	postmaster, err := readProcStat(self.ppid)
	if err != nil {
		return 0, err
	}
	total := postmaster.cpu + postmaster.waited
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err == nil && st.ppid == self.ppid {
			total += st.cpu // gone meanwhile: not counted, as a waited child is counted above
		}
	}
	return total, nil
}

// apiReplica is one `ate apiserver` run in this process by up.RunAPIServer,
// exactly as the command wires it.
type apiReplica struct {
	addr, mgmt string
	cancel     context.CancelFunc
	done       chan error
	conn       *grpc.ClientConn
	client     atev1.ControlClient
}

// startAPIServer runs up.RunAPIServer over store (a bolt:// or postgres://
// URL) with the fake sandbox class and the durable snapshot store
// snapshots, and connects a client.
func startAPIServer(tb testing.TB, dataDir, store, snapshots string) *apiReplica {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &apiReplica{cancel: cancel, done: make(chan error, 1), mgmt: freeAddr(tb)}
	ready := make(chan string, 1)
	go func() {
		r.done <- up.RunAPIServer(ctx, up.APIServerConfig{TLS: pki.Settings{Insecure: true}, Auth: auth.Config{Insecure: true}, DataDir: dataDir, Store: store, Snapshots: snapshots,
			Addr: "127.0.0.1:0", ManagementAddr: r.mgmt, SandboxClass: fake.Class, Ready: func(addr string) { ready <- addr }})
	}()
	select {
	case r.addr = <-ready:
	case err := <-r.done:
		cancel()
		tb.Fatalf("ate apiserver: %v", err)
	}
	var err error
	if r.conn, err = grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		_ = r.stop()
		tb.Fatal(err)
	}
	r.client = atev1.NewControlClient(r.conn)
	return r
}

// stop ends the API server gracefully and waits for it.
func (r *apiReplica) stop() error {
	var err error
	if r.conn != nil {
		err = r.conn.Close()
	}
	r.cancel()
	return errors.Join(err, <-r.done)
}

// protoCluster is API server replicas over one store and node processes
// registered with all of them.
type protoCluster struct {
	replicas []*apiReplica
	nodes    []*nodeProc
	actors   []string
	// workers is how many workers the nodes have between them.
	workers int
	// pgURL is the PostgreSQL database's URL; empty over bbolt.
	pgURL string
}

// nodesPerCluster is how many fake node processes a protoCluster runs;
// their workers add up to the cluster's.
const nodesPerCluster = 2

// startProtoCluster starts replicas API servers over store ("" for a
// bbolt file on disk), nodesPerCluster node processes with workers
// workers between them, the counter template and actorsPerClient actors
// per worker. Node data
// and the shared snapshot directory are on tmpfs: the nodes' fsync'd
// snapshot commits are not what this measures (BenchmarkCeilings does).
func startProtoCluster(b *testing.B, replicas int, store string, workers int) *protoCluster {
	b.Helper()
	dir := b.TempDir()
	ref, _ := layout(b, dir)
	shm := mediumDir(b, "tmpfs")
	snaps := filepath.Join(shm, "snapshots")
	c := &protoCluster{pgURL: store, workers: workers}
	b.Cleanup(func() { c.close(b) })
	for i := range replicas {
		st := store
		if st == "" {
			st = "bolt://" + filepath.Join(dir, "ate.db")
		}
		c.replicas = append(c.replicas, startAPIServer(b, filepath.Join(dir, fmt.Sprintf("api%d", i)), st, snaps))
	}
	var addrs []string
	for _, r := range c.replicas {
		addrs = append(addrs, r.addr)
	}
	for i := range nodesPerCluster {
		c.nodes = append(c.nodes, startNode(b, nodeSpec{Name: fmt.Sprintf("node%d", i), API: strings.Join(addrs, ","),
			DataDir: filepath.Join(shm, fmt.Sprintf("node%d", i)), Snapshots: snaps, Workers: workers / nodesPerCluster}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := waitNodes(ctx, c.replicas[0].client, nodesPerCluster, int32(workers)); err != nil {
		b.Fatal(err)
	}
	if err := CreateTemplate(ctx, c.replicas[0].client, templateName, ref); err != nil {
		b.Fatal(err)
	}
	c.actors = createActors(b, c.replicas[0].client, workers*actorsPerClient)
	if store != "" {
		if err := execPG(ctx, store, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// waitNodes polls ListNodes until n nodes are READY with workers free
// workers between them.
func waitNodes(ctx context.Context, c atev1.ControlClient, n int, workers int32) error {
	tick := time.NewTicker(templatePoll)
	defer tick.Stop()
	for {
		resp, err := c.ListNodes(ctx, &atev1.ListNodesRequest{})
		if err != nil {
			return err
		}
		ready, free := 0, int32(0)
		for _, nd := range resp.GetNodes() {
			if nd.GetPhase() == atev1.Node_READY {
				ready++
				free += nd.GetFreeWorkers()
			}
		}
		if ready == n && free == workers {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d nodes ready with %d of %d workers free: %w", ready, n, free, workers, ctx.Err())
		case <-tick.C:
		}
	}
}

// close stops the nodes (each drains through the API servers), then the
// API servers.
func (c *protoCluster) close(tb testing.TB) {
	for _, p := range c.nodes {
		if err := p.stop(); err != nil {
			tb.Error(err)
		}
	}
	for _, r := range c.replicas {
		if err := r.stop(); err != nil {
			tb.Errorf("api server: %v", err)
		}
	}
}

// counts reads the cluster's counters (protoCounts).
func (c *protoCluster) counts(b *testing.B) protoCounts {
	var out protoCounts
	ctx := context.Background()
	for _, r := range c.replicas {
		if err := out.scrape(ctx, r.mgmt); err != nil {
			b.Fatal(err)
		}
	}
	if c.pgURL != "" {
		if err := out.readPG(ctx, c.pgURL); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// execPG runs sql in the database of url.
func execPG(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// nodesCPU is the CPU time the cluster's node processes used so far.
func (c *protoCluster) nodesCPU(b *testing.B) time.Duration {
	var sum time.Duration
	for _, p := range c.nodes {
		d, err := p.cpu()
		if err != nil {
			b.Fatal(err)
		}
		sum += d
	}
	return sum
}

// BenchmarkNodeProtocol measures BenchmarkWakeups' wake-up (each client
// loops ResumeActor → SuspendActor over its own actors through the gRPC
// API; one op is one wake-up, the resume plus the suspend that frees its
// worker) in a cluster as `ate apiserver` and `ate node` run it: the API
// server(s), wired by up.RunAPIServer as the command wires them, in this
// process; two fake-sandbox nodes (up.RunNode, the fake class) as child
// processes speaking the node gRPC protocol over loopback, with as many
// workers between them as the most clients of the sweep, so that a
// client never waits for capacity: the control plane is what is
// measured. The sweep is every power of two from 1 to 1024 clients
// (ATE_BENCH_SCALE=full), or 1, 64 and 256 (make test's one iteration,
// which keeps the harness from rotting), or ATE_BENCH_CLIENTS's list. Stores: bbolt on disk (one API server), and a
// private PostgreSQL with its durability defaults (fsync and
// synchronous_commit on, data on disk) with one API server and with two
// replicas, client i calling replica i mod n. The nodes' data and the
// shared snapshot directory are on tmpfs: the API servers and the store
// are what is measured; the nodes' own fsync'd snapshot commit is
// BenchmarkCeilings' snapshot-cycle. Every component runs --insecure
// (plaintext, no tokens), as before issue 18, so the figures stay
// comparable with earlier runs; what TLS and the authorisation
// interceptor add is BenchmarkSecurityOverhead's (test/e2e).
//
// Metrics: wakeups/s (resumes completed per second of wall time),
// p50/p99-ms of ResumeActor as the client sees it, cycle-p50/p99-ms of
// the resume and suspend, api-cpu-ms/wakeup (this process: API servers
// and clients) and node-cpu-ms/wakeup (both node processes); over
// PostgreSQL also pg-cpu-ms/wakeup (every process of the server, the
// benchmark's own sampling included: pgCPU), pg-active-backends and
// pg-lock-wait-share, and with -v
// every wait event's share and the statements per wake-up in the log
// (waitSampler, logStatements).
func BenchmarkNodeProtocol(b *testing.B) {
	counts := []int{1, 64, 256}
	if fullBench() {
		counts = nil
		for n := 1; n <= 1024; n *= 2 {
			counts = append(counts, n)
		}
	}
	if env := os.Getenv("ATE_BENCH_CLIENTS"); env != "" {
		// A sweep of one's own ("16,64"), for a closer look at some
		// concurrencies; the workers follow its largest.
		counts = nil
		for f := range strings.SplitSeq(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("ATE_BENCH_CLIENTS=%q: want client counts like 16,64", env)
			}
			counts = append(counts, n)
		}
	}
	var pg *pgtest.Server
	for _, tc := range storeSetups {
		b.Run(tc.name, func(b *testing.B) {
			outer := b // the cluster outlives each clients= run
			var c *protoCluster
			for _, clients := range counts {
				b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
					if c == nil {
						url := ""
						if tc.postgres {
							if pg == nil {
								// Stopped once every cluster over it
								// has (after the loop).
								var err error
								if pg, err = pgtest.StartLocalDurable(context.Background()); err != nil {
									b.Fatal(err)
								}
							}
							url = pg.NewDatabase(outer)
						}
						c = startProtoCluster(outer, tc.replicas, url, slices.Max(counts))
					}
					runProtoWakeups(b, c, clients)
				})
			}
		})
	}
	if pg != nil {
		if err := pg.Stop(); err != nil {
			b.Error(err)
		}
	}
}

// runProtoWakeups runs b.N wake-ups over clients goroutines, client i
// calling replica i mod len(c.replicas) about its own actors.
func runProtoWakeups(b *testing.B, c *protoCluster, clients int) {
	ctx := context.Background()
	// One untimed wake-up per client first, all at once: the first burst
	// at a new concurrency pays for what later ones reuse (new pooled
	// connections, each preparing its statements; new PostgreSQL
	// backends loading their caches) and took up to 1.5 s at 64 clients,
	// which alone made the row's p99: that is start-up, not the rate
	// the row measures.
	var warm sync.WaitGroup
	for i := range clients {
		warm.Go(func() {
			cl := c.replicas[i%len(c.replicas)].client
			name := c.actors[i*actorsPerClient]
			if _, err := resume(ctx, cl, name); err != nil {
				b.Error(err)
				return
			}
			if _, err := suspend(ctx, cl, name); err != nil {
				b.Error(err)
			}
		})
	}
	warm.Wait()
	if b.Failed() {
		return
	}
	resumes := make([][]time.Duration, clients)
	counts0 := c.counts(b)
	cpu0, node0 := processCPU(b), c.nodesCPU(b)
	var waits *waitSampler
	var stmts0 map[string]stmtStats
	var pg0 time.Duration
	if c.pgURL != "" {
		var err error
		if stmts0, err = pgStatements(ctx, c.pgURL); err != nil {
			b.Fatal(err)
		}
		if pg0, err = pgCPU(ctx, c.pgURL); err != nil {
			b.Fatal(err)
		}
		waits = sampleWaits(c.pgURL)
	}
	cycles, elapsed := runParallel(b, clients, func(i, n int) error {
		cl := c.replicas[i%len(c.replicas)].client
		name := c.actors[i*actorsPerClient+n%actorsPerClient]
		t0 := time.Now()
		if _, err := resume(ctx, cl, name); err != nil {
			return err
		}
		resumes[i] = append(resumes[i], time.Since(t0))
		_, err := suspend(ctx, cl, name)
		return err
	})
	cpu, nodeCPU := processCPU(b)-cpu0, c.nodesCPU(b)-node0
	if waits != nil {
		waits.end(b)
		pg, err := pgCPU(ctx, c.pgURL)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(latency.Ms(pg-pg0)/float64(b.N), "pg-cpu-ms/wakeup")
		stmts, err := pgStatements(ctx, c.pgURL)
		if err != nil {
			b.Fatal(err)
		}
		logStatements(b, stmts0, stmts, b.N)
	}
	c.counts(b).minus(counts0).report(b, b.N, c.pgURL != "")
	// Every suspend freed its worker.
	nodes, err := c.replicas[0].client.ListNodes(ctx, &atev1.ListNodesRequest{})
	if err != nil {
		b.Fatal(err)
	}
	var free int32
	for _, nd := range nodes.GetNodes() {
		free += nd.GetFreeWorkers()
	}
	if free != int32(c.workers) {
		b.Fatalf("%d of %d workers free after every wake-up was suspended", free, c.workers)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "wakeups/s")
	b.ReportMetric(latency.Ms(cpu)/float64(b.N), "api-cpu-ms/wakeup")
	b.ReportMetric(latency.Ms(nodeCPU)/float64(b.N), "node-cpu-ms/wakeup")
	reportLatency(b, "", slices.Concat(resumes...))
	reportLatency(b, "cycle-", cycles)
}
