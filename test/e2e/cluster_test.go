package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"substrate.dev/ate/internal/testport"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/ateconfig"
	"substrate.dev/ate/internal/netns"
	"substrate.dev/ate/internal/sandbox/gvisor"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/snapshot/s3/s3test"
)

// component is one running `ate apiserver`, `ate node` or `ate router`
// process: the components of a cluster, each as its own process, here
// all on one machine with their own data dirs and worker prefixes.
type component struct {
	t    testing.TB
	name string
	args []string
	// env is added to the test's environment.
	env []string
	// host, if set, is the network namespace the process runs in (the
	// chaos harness's: chaosNet).
	host *chaosHost
	cmd  *exec.Cmd

	mu   sync.Mutex
	log  strings.Builder
	done chan struct{}
	err  error
	// ready gets the first log record of the running process whose msg
	// is the ready message launch was given.
	ready chan map[string]any
}

// startComponent runs `ate <args…>` and waits for the log record readyMsg;
// it returns the record's fields. start runs it again (after kill or
// terminate) with the same arguments.
func startComponent(t testing.TB, name, readyMsg string, args ...string) (*component, map[string]any) {
	t.Helper()
	c := launchComponent(t, name, readyMsg, args...)
	return c, c.waitReady()
}

// launchComponent runs `ate <args…>` without waiting for it: several
// started together (waitReady each afterwards, on the test's goroutine)
// race as processes do.
func launchComponent(t testing.TB, name, readyMsg string, args ...string) *component {
	t.Helper()
	return launchComponentEnv(t, nil, name, readyMsg, args...)
}

// launchComponentEnv is launchComponent with env added to the process's
// environment.
func launchComponentEnv(t testing.TB, env []string, name, readyMsg string, args ...string) *component {
	t.Helper()
	return launchComponentIn(t, env, nil, name, readyMsg, args...)
}

// launchComponentIn is launchComponentEnv with the process run in host's
// network namespace (nil: the test's own).
func launchComponentIn(t testing.TB, env []string, host *chaosHost, name, readyMsg string, args ...string) *component {
	t.Helper()
	// Separate API servers and nodes read local images only under an
	// operator's image roots (default /images): the tests' images are the
	// repository's build/images.
	if len(args) > 0 && (args[0] == "apiserver" || args[0] == "node") && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--image-root") }) {
		args = append([]string{args[0], "--image-root", filepath.Join(repoDir, "build/images")}, args[1:]...)
	}
	c := &component{t: t, name: name, args: withTLS(t, args), env: env, host: host, done: make(chan struct{})}
	c.launch(readyMsg)
	t.Cleanup(func() {
		c.terminate(90 * time.Second)
		if t.Failed() {
			t.Logf("%s log:\n%s", c.name, c.logText())
		}
		// A node the test killed for good (a lost node) left its
		// sandboxes, network namespaces and runsc root: what its next
		// start would clear, the test clears.
		if i := slices.Index(args, "--worker-prefix"); i >= 0 && i+1 < len(args) {
			reapWorkerPrefix(t, args[i+1])
		}
	})
	return c
}

// reapWorkerPrefix removes what a SIGKILLed node with worker prefix
// left on the machine, as that node's restart would: its runsc
// containers (sandbox and gofer processes), its runsc root with the
// pinned null network namespace and lock file, and its workers' network
// namespaces. After a clean exit there is nothing to find.
func reapWorkerPrefix(t testing.TB, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := filepath.Join("/run/ate", prefix)
	// Even without a root yet: a runsc command the node had started (a
	// standby's create) runs on without it and may make one; DestroyAll
	// ends those first.
	rt, err := gvisor.New(gvisor.Config{RootDir: root, ForceCLI: true})
	if err != nil {
		t.Errorf("reap worker prefix %s: %v", prefix, err)
		return
	}
	if err := rt.DestroyAll(ctx); err != nil {
		t.Errorf("reap worker prefix %s: %v", prefix, err)
	}
	if err := rt.Close(); err != nil {
		t.Errorf("reap worker prefix %s: %v", prefix, err)
	}
	_ = os.Remove(root + ".lock")
	entries, _ := os.ReadDir(netns.RunDir)
	for _, e := range entries {
		if name := e.Name(); strings.HasPrefix(name, prefix+"-") && !strings.HasSuffix(name, netns.OuterSuffix) {
			if err := netns.Remove(ctx, netns.SlotFor(name)); err != nil {
				t.Errorf("reap worker prefix %s: %v", prefix, err)
			}
		}
	}
}

// start runs the component again (after kill or terminate) with the same
// arguments and waits for the log record readyMsg.
func (c *component) start(readyMsg string) map[string]any {
	c.t.Helper()
	c.launch(readyMsg)
	return c.waitReady()
}

func (c *component) launch(readyMsg string) {
	c.t.Helper()
	argv := append([]string{ateBin}, c.args...)
	if c.host != nil {
		argv = c.host.command(argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = repoDir
	if c.env != nil {
		cmd.Env = append(os.Environ(), c.env...)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.cmd, c.done = cmd, make(chan struct{})
	c.ready = make(chan map[string]any, 1)
	done, ready := c.done, c.ready
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.log.WriteString(line + "\n")
			c.mu.Unlock()
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == readyMsg {
				select {
				case ready <- rec:
				default:
				}
			}
		}
		c.err = cmd.Wait()
		close(done)
	}()
}

// waitReady waits for the ready record of the process launch started
// and returns its fields.
func (c *component) waitReady() map[string]any {
	c.t.Helper()
	select {
	case rec := <-c.ready:
		return rec
	case <-c.done:
		c.t.Fatalf("%s exited before it was ready (%v); log:\n%s", c.name, c.err, c.logText())
	case <-time.After(90 * time.Second):
		c.t.Fatalf("%s did not become ready; log:\n%s", c.name, c.logText())
	}
	return nil
}

func (c *component) logText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

// records counts the log records whose msg is msg.
func (c *component) records(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Count(c.log.String(), `"msg":"`+msg+`"`)
}

// kill sends SIGKILL and waits for the process to end.
func (c *component) kill() {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Kill()
	<-c.done
	c.cmd = nil
}

// terminate sends SIGTERM and waits (up to timeout, then kills); it
// reports a non-zero exit.
func (c *component) terminate(timeout time.Duration) {
	if err := c.stop(timeout); err != nil {
		c.t.Errorf("%s after SIGTERM: %v", c.name, err)
	}
}

// stop sends SIGTERM and returns how the process exited (killed after
// timeout, an error).
func (c *component) stop(timeout time.Duration) error {
	if c.cmd == nil {
		return nil
	}
	defer func() { c.cmd = nil }()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.err
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("did not stop %s after SIGTERM", timeout)
	}
}

// cluster is one API server, nodes and one router as separate processes
// over a real SeaweedFS S3 server; in is the installation-shaped view the
// other tests' helpers (get, ate, actor…) work on.
type cluster struct {
	t      testing.TB
	s3     *s3test.Server
	api    *component
	nodes  map[string]*component
	router *component
	in     *installation
	dir    string
	snaps  string
	// insecure: every component runs --insecure (no TLS, no tokens).
	insecure bool
}

// clusterTiming makes losses and collections quick to see: heartbeat
// 250 ms, lost after 2 s, orphans collected every second.
var clusterTiming = []string{"--node-heartbeat", "250ms", "--node-lost-after", "2s", "--snapshot-gc-interval", "1s"}

func startCluster(t testing.TB, nodes ...string) *cluster {
	t.Helper()
	return startClusterTimed(t, clusterTiming, nodes...)
}

// startClusterTimed is startCluster with the API server's timing flags.
func startClusterTimed(t testing.TB, timing []string, nodes ...string) *cluster {
	t.Helper()
	return startClusterWith(t, clusterOptions{timing: timing}, nodes...)
}

// clusterOptions are how startClusterWith starts the components.
type clusterOptions struct {
	// timing are the API server's timing flags (clusterTiming).
	timing []string
	// insecure runs every component with --insecure: plaintext and no
	// authentication, as before issue 18 (the security benchmark's
	// baseline); otherwise certificates from caDir and the admin token.
	insecure bool
	// apiArgs are more flags of the API server.
	apiArgs []string
}

// startClusterWith is startCluster with opts.
func startClusterWith(t testing.TB, opts clusterOptions, nodes ...string) *cluster {
	t.Helper()
	timing := opts.timing
	if opts.insecure {
		timing = append(slices.Clone(timing), "--insecure")
	}
	c := &cluster{t: t, s3: s3test.New(t), nodes: map[string]*component{}, dir: t.TempDir(), insecure: opts.insecure}
	t.Setenv("AWS_ACCESS_KEY_ID", c.s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", c.s3.SecretKey)
	c.snaps = c.s3.URL("e2e")
	// Fixed ports: nodes and the router find a restarted API server at
	// the same address, clients a restarted router.
	apiListen, routerListen := freeAddr(t), freeAddr(t)
	var fields map[string]any
	c.api, fields = startComponent(t, "apiserver", "ate apiserver ready", append([]string{"apiserver",
		"--data-dir", filepath.Join(c.dir, "api"), "--listen", apiListen, "--snapshots", c.snaps, "--log-level", "debug"},
		append(slices.Clone(timing), opts.apiArgs...)...)...)
	apiAddr := fields["api"].(string)
	for _, n := range nodes {
		c.startNode(n, apiAddr)
	}
	routerArgs := []string{"router", "--api", apiAddr, "--listen", routerListen, "--drain-delay", "0s", "--log-level", "debug"}
	if opts.insecure {
		routerArgs = append(routerArgs, "--insecure")
	}
	c.router, fields = startComponent(t, "router", "ate router ready", routerArgs...)
	cc := clusterClientConfig(apiAddr)
	if opts.insecure {
		cc = ateconfig.Config{Server: apiAddr}
	}
	c.in = clusterInstallationWith(t, c.dir, cc, fields["router"].(string))
	return c
}

// clusterInstallation is the installation-shaped view of components
// with their API server at apiAddr and router at routerAddr: a client
// config under dir/cli and a Control client.
func clusterInstallation(t testing.TB, dir, apiAddr, routerAddr string) *installation {
	t.Helper()
	return clusterInstallationWith(t, dir, clusterClientConfig(apiAddr), routerAddr)
}

// clusterInstallationWith is clusterInstallation with client config cc.
func clusterInstallationWith(t testing.TB, dir string, cc ateconfig.Config, routerAddr string) *installation {
	t.Helper()
	apiAddr := cc.Server
	in := &installation{t: t, dataDir: filepath.Join(dir, "cli"), apiAddr: apiAddr, routerAddr: routerAddr}
	if err := ateconfig.Write(filepath.Join(in.dataDir, "config.yaml"), cc); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(apiAddr, dialOptions(t, cc)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	in.client = atev1.NewControlClient(conn)
	return in
}

// counterActor creates the counter template and the actor counter-1 and
// GETs it once (count=1): where most cluster tests start.
func (c *cluster) counterActor() {
	c.t.Helper()
	c.in.createTemplate("test/e2e/testdata/counter.yaml", "counter")
	c.in.ate("create", "actor", "counter-1", "--template", "counter")
	c.in.mustCount("default/counter-1", 1)
}

// workerPrefix is node name's --worker-prefix: unique to this cluster,
// so its runsc root (/run/ate/<prefix>) can be inspected.
func (c *cluster) workerPrefix(name string) string {
	sum := sha256.Sum256([]byte(c.dir + "/" + name))
	return "e2e" + hex.EncodeToString(sum[:3])
}

// containers lists the runsc containers in node name's runsc root.
func (c *cluster) containers(name string) []string {
	c.t.Helper()
	out, err := exec.Command(gvisor.DefaultRunscPath(), "--root", filepath.Join("/run/ate", c.workerPrefix(name)), "list", "-quiet").CombinedOutput()
	if err != nil {
		c.t.Fatalf("runsc list: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

// freeAddr returns a loopback address with a port free now, outside the
// range the kernel hands to ":0" binds, so no component started
// meanwhile takes it (testport).
func freeAddr(t testing.TB) string {
	t.Helper()
	return testport.Addr(t)
}

func (c *cluster) startNode(name, apiAddr string, extra ...string) {
	c.t.Helper()
	if c.insecure {
		extra = append(slices.Clone(extra), "--insecure")
	}
	n, _ := startComponent(c.t, "node "+name, "ate node ready", append([]string{"node", "--api", apiAddr, "--name", name,
		"--labels", "node=" + name, // what benchmarks pin placement with
		"--worker-prefix", c.workerPrefix(name),
		"--data-dir", filepath.Join(c.dir, name), "--workers", "1", "--snapshots", c.snaps, "--log-level", "debug"}, extra...)...)
	c.nodes[name] = n
}

// nodeOf returns the node of the worker the actor holds ("" if none).
func (c *cluster) nodeOf(actor string) string {
	c.t.Helper()
	w := c.in.actor(actor).GetWorker()
	if w == "" {
		return ""
	}
	resp, err := c.in.client.ListWorkers(context.Background(), &atev1.ListWorkersRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, x := range resp.GetWorkers() {
		if x.GetName() == w {
			return x.GetNode()
		}
	}
	return ""
}

func (c *cluster) nodePhase(name string) atev1.Node_Phase {
	c.t.Helper()
	resp, err := c.in.client.ListNodes(context.Background(), &atev1.ListNodesRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, n := range resp.GetNodes() {
		if n.GetName() == name {
			return n.GetPhase()
		}
	}
	return atev1.Node_PHASE_UNSPECIFIED
}

func other(n string) string {
	if n == "node-a" {
		return "node-b"
	}
	return "node-a"
}

// TestClusterSuspendOnOneNodeResumeOnAnother: three kinds of process
// (API server, two nodes, router) over the S3 server. An actor suspended
// on one node whose node then drains away resumes on the other node with
// its memory (the count) intact, downloading its snapshot from S3.
func TestClusterSuspendOnOneNodeResumeOnAnother(t *testing.T) {
	c := startCluster(t, "node-a", "node-b")
	c.counterActor()
	c.in.mustCount("default/counter-1", 2)
	first := c.nodeOf("counter-1")
	if first == "" {
		t.Fatal("running actor holds no worker")
	}
	c.in.ate("suspend", "actor", "counter-1")
	if st := c.in.actor("counter-1").GetState().String(); st != "SUSPENDED" {
		t.Fatalf("state after suspend = %s", st)
	}
	keys, err := c.s3.Keys(context.Background(), "e2e/")
	if err != nil || len(keys) == 0 {
		t.Fatalf("no snapshot objects in the bucket after suspend (%v)", err)
	}
	c.nodes[first].terminate(60 * time.Second)
	waitFor(t, "node "+first+" gone from the pool", 10*time.Second, func() bool { return c.nodePhase(first) == atev1.Node_LOST })
	c.in.mustCount("default/counter-1", 3)
	if got := c.nodeOf("counter-1"); got != other(first) {
		t.Fatalf("resumed on %q, want %s", got, other(first))
	}
	out := c.in.ate("get", "nodes")
	if !strings.Contains(out, other(first)) || !strings.Contains(out, atev1.Node_READY.String()) {
		t.Fatalf("ate get nodes:\n%s", out)
	}
}

// TestClusterNodeKilled: kill -9 of the node running an actor. Within the
// loss deadline the actor is CRASHED; the next request resumes it on the
// other node from its last durable snapshot; the killed node restarts,
// rejoins and does not take the actor back.
func TestClusterNodeKilled(t *testing.T) {
	c := startCluster(t, "node-a", "node-b")
	c.counterActor()
	c.in.ate("suspend", "actor", "counter-1") // the durable snapshot: count=1
	c.in.mustCount("default/counter-1", 2)    // memory past it, lost below
	victim := c.nodeOf("counter-1")
	c.nodes[victim].kill()
	waitFor(t, "actor CRASHED after its node was killed", 15*time.Second, func() bool {
		return c.in.actor("counter-1").GetState().String() == "CRASHED"
	})
	if msg := c.in.actor("counter-1").GetMessage(); !strings.Contains(msg, victim) || !strings.Contains(msg, "lost") {
		t.Fatalf("crash message %q does not say node %s was lost", msg, victim)
	}
	c.in.mustCount("default/counter-1", 2)
	if got := c.nodeOf("counter-1"); got != other(victim) {
		t.Fatalf("resumed on %q, want %s", got, other(victim))
	}
	// The killed agent's sandbox outlived it (runsc runs it in its own
	// processes); the restarted agent must destroy it.
	stale := c.containers(victim)
	if len(stale) == 0 {
		t.Fatalf("no container left in %s's runsc root after kill -9: nothing to check the clean-up with", victim)
	}
	c.nodes[victim].start("ate node ready")
	waitFor(t, "killed node back", 15*time.Second, func() bool { return c.nodePhase(victim) == atev1.Node_READY })
	if got := c.nodeOf("counter-1"); got != other(victim) {
		t.Fatalf("after the killed node rejoined the actor is on %q, want it left on %s", got, other(victim))
	}
	for _, id := range c.containers(victim) {
		if slices.Contains(stale, id) {
			t.Fatalf("container %s of the killed agent still exists after the restart", id)
		}
	}
	c.in.mustCount("default/counter-1", 3)
}

// TestClusterRequestsParkThroughNodeLoss: kill -9 of the node running
// an actor, and requests for it sent at once: none is refused. They park
// in the router while the API server still places the actor on the dead
// node (until its loss deadline), and are served once the actor resumes
// on the other node from its last durable snapshot, each once, with its
// own count.
func TestClusterRequestsParkThroughNodeLoss(t *testing.T) {
	c := startCluster(t, "node-a", "node-b")
	c.counterActor()
	c.in.ate("suspend", "actor", "counter-1") // the durable snapshot: count=1
	c.in.mustCount("default/counter-1", 2)    // memory past it, lost below
	victim := c.nodeOf("counter-1")
	c.nodes[victim].kill()
	type answer struct {
		code int
		body string
		err  error
		took time.Duration
	}
	const n = 4
	start := time.Now()
	answers := make(chan answer, n)
	for range n {
		go func() {
			code, body, _, err := c.in.request(http.MethodGet, "default/counter-1", "/", "")
			answers <- answer{code, strings.TrimSpace(body), err, time.Since(start)}
		}()
	}
	var counts []string
	for range n {
		a := <-answers
		if a.err != nil || a.code != http.StatusOK {
			t.Errorf("request sent as node %s was killed: %d %q %v after %s, want 200", victim, a.code, a.body, a.err, a.took)
			continue
		}
		t.Logf("answered %s after %s", a.body, a.took.Round(time.Millisecond))
		counts = append(counts, a.body)
	}
	slices.Sort(counts)
	if want := []string{"count=2", "count=3", "count=4", "count=5"}; !slices.Equal(counts, want) {
		t.Fatalf("counts %v, want %v: each request served once from the snapshot at count=1", counts, want)
	}
	if got := c.nodeOf("counter-1"); got != other(victim) {
		t.Fatalf("served on %q, want %s", got, other(victim))
	}
}

// TestClusterNodeKilledUnderLoad: three clients send requests to a
// counter actor back to back and its node is killed (SIGKILL) among
// them. Every request is answered 200: those sent while the control
// plane still placed the actor on the dead node wait in the router until
// the actor is restored on the other node from its last durable snapshot
// (count=1). The counts show one copy at a time: no count is answered
// twice among the requests that ended before the kill, nor among those
// sent after the actor ran on the other node, and the latter start again
// from the snapshot. How many requests waited, and how long, is logged.
func TestClusterNodeKilledUnderLoad(t *testing.T) {
	c := startCluster(t, "node-a", "node-b")
	c.counterActor()
	c.in.ate("suspend", "actor", "counter-1") // the durable snapshot: count=1
	c.in.mustCount("default/counter-1", 2)
	victim := c.nodeOf("counter-1")
	type answer struct {
		start, end time.Time
		count      int
	}
	var (
		mu       sync.Mutex
		answers  []answer
		failures []string
		clients  sync.WaitGroup
		done     = make(chan struct{})
	)
	for range 3 {
		repeat(&clients, done, func() {
			start := time.Now()
			n, err := c.in.count("default/counter-1")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, fmt.Sprintf("%v after %s", err, time.Since(start)))
				return
			}
			answers = append(answers, answer{start, time.Now(), n})
		})
	}
	var stopped sync.Once
	stop := func() { stopped.Do(func() { close(done); clients.Wait() }) }
	defer stop()
	answered := func(more int) func() bool {
		mu.Lock()
		want := len(answers) + more
		mu.Unlock()
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(answers) >= want || len(failures) > 0
		}
	}
	waitFor(t, "requests before the kill", 30*time.Second, answered(30))
	killed := time.Now()
	c.nodes[victim].kill()
	waitFor(t, "the actor to run on the other node", time.Minute, func() bool { return c.nodeOf("counter-1") == other(victim) })
	moved := time.Now()
	waitFor(t, "requests after the move", 30*time.Second, answered(30))
	stop()
	if len(failures) > 0 {
		t.Fatalf("%d requests failed around the kill of %s, first: %s", len(failures), victim, failures[0])
	}
	before, after := map[int]bool{}, map[int]bool{}
	waited, longest := 0, time.Duration(0)
	for _, a := range answers {
		switch {
		case a.end.Before(killed):
			if before[a.count] {
				t.Fatalf("count %d answered twice before the kill", a.count)
			}
			before[a.count] = true
		case a.start.After(moved):
			if after[a.count] || a.count < 2 {
				t.Fatalf("count %d answered after the move: twice, or below the snapshot's next (2)", a.count)
			}
			after[a.count] = true
		}
		if a.end.After(killed) && a.start.Before(moved) {
			waited++
			longest = max(longest, a.end.Sub(a.start))
		}
	}
	// The node's memory died with it: the restored actor counts on from
	// the snapshot, below what the dead node had answered.
	if len(before) == 0 || len(after) == 0 || slices.Min(slices.Collect(maps.Keys(after))) >= slices.Max(slices.Collect(maps.Keys(before))) {
		t.Fatalf("counts before the kill %v, after the move %v: want the latter to start again from the snapshot",
			slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
	t.Logf("%d requests, all 200; %d were in flight between the kill and the actor running on %s (%s after the kill), the longest %s",
		len(answers), waited, other(victim), moved.Sub(killed).Round(time.Millisecond), longest.Round(time.Millisecond))
}

// TestClusterCorruptSnapshot: a byte flipped in a snapshot object in the
// bucket makes the resume on a node without a cached copy fail with a
// message naming the object and the checksums; the actor stays
// SUSPENDED (resumable) and can be deleted.
func TestClusterCorruptSnapshot(t *testing.T) {
	c := startCluster(t, "node-a", "node-b")
	c.counterActor()
	first := c.nodeOf("counter-1")
	c.in.ate("suspend", "actor", "counter-1")
	ref := snapshot.Bare(c.in.actor("counter-1").GetSnapshot())
	ctx := context.Background()
	keys, err := c.s3.Keys(ctx, "e2e/"+ref+"/")
	if err != nil {
		t.Fatal(err)
	}
	var target string
	for _, k := range keys {
		if !strings.HasSuffix(k, "manifest.json") && (target == "" || strings.Contains(k, "pages")) {
			target = k
		}
	}
	if target == "" {
		t.Fatalf("no data object under %s: %v", ref, keys)
	}
	if err := c.s3.Corrupt(ctx, target); err != nil {
		t.Fatal(err)
	}
	// The node that suspended it has a verified copy in its cache; the
	// other must download.
	c.nodes[first].terminate(60 * time.Second)
	waitFor(t, "node "+first+" left", 10*time.Second, func() bool { return c.nodePhase(first) == atev1.Node_LOST })
	code, body := c.in.get("default/counter-1", "/")
	if code < 500 {
		t.Fatalf("resume from a corrupt snapshot answered %d %q", code, body)
	}
	a := c.in.actor("counter-1")
	if a.GetState().String() != "SUSPENDED" {
		t.Fatalf("after the failed resume the actor is %s, want SUSPENDED", a.GetState().String())
	}
	if msg := a.GetMessage(); !strings.Contains(msg, target) || !strings.Contains(msg, "sha256") {
		t.Fatalf("failure message %q does not name object %s and its checksum", msg, target)
	}
	c.in.ate("delete", "actor", "counter-1")
}

// TestClusterBadInput: start-up errors are clear and quick: an S3
// endpoint nobody listens on, wrong credentials, a missing bucket, and a
// node registering with a name that is live elsewhere.
func TestClusterBadInput(t *testing.T) {
	c := startCluster(t, "node-a")
	dir := t.TempDir()
	for _, tc := range []struct {
		name, url, want string
		env             []string
	}{
		{"unreachable endpoint", "s3://snapshots/x?endpoint=http://127.0.0.1:1", "127.0.0.1:1", nil},
		{"missing bucket", strings.Replace(c.snaps, "s3://"+c.s3.Bucket+"/", "s3://no-such-bucket/", 1), "no-such-bucket", nil},
		{"wrong credentials", c.snaps, "credentials rejected", []string{"AWS_SECRET_ACCESS_KEY=wrong"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(ateBin, withTLS(t, []string{"apiserver", "--data-dir", filepath.Join(dir, tc.name), "--listen", "127.0.0.1:0", "--snapshots", tc.url})...)
			cmd.Env = append(cmd.Environ(), tc.env...)
			out, err := runBounded(cmd, 60*time.Second)
			if err == nil {
				t.Fatalf("apiserver started with %s:\n%s", tc.url, out)
			}
			if !strings.Contains(out, "snapshot store") || !strings.Contains(out, tc.want) {
				t.Fatalf("error does not say what is wrong (want %q):\n%s", tc.want, out)
			}
		})
	}
	t.Run("the same node started twice", func(t *testing.T) {
		c.counterActor()
		out, err := runBounded(exec.Command(ateBin, c.nodes["node-a"].args...), 60*time.Second)
		if err == nil || !strings.Contains(out, "in use by another ate process") {
			t.Fatalf("a second node-a on the same data dir: %v\n%s", err, out)
		}
		// The live node lost nothing: its actor still has its memory.
		c.in.mustCount("default/counter-1", 2)
	})
	t.Run("a node on another snapshot store", func(t *testing.T) {
		cmd := exec.Command(ateBin, withTLS(t, []string{"node", "--api", c.in.apiAddr, "--name", "node-z", "--data-dir", filepath.Join(dir, "z"),
			"--workers", "1"})...) // no --snapshots: a directory of its own
		out, err := runBounded(cmd, 60*time.Second)
		if err == nil || !strings.Contains(out, "uses snapshot store") {
			t.Fatalf("a node without the API server's snapshot store: %v\n%s", err, out)
		}
	})
	t.Run("duplicate node name", func(t *testing.T) {
		cmd := exec.Command(ateBin, withTLS(t, []string{"node", "--api", c.in.apiAddr, "--name", "node-a", "--data-dir", filepath.Join(dir, "dup"),
			"--workers", "1", "--snapshots", c.snaps})...)
		out, err := runBounded(cmd, 60*time.Second)
		if err == nil {
			t.Fatalf("a second node-a registered:\n%s", out)
		}
		if !strings.Contains(out, "already registered") {
			t.Fatalf("error does not say the name is taken:\n%s", out)
		}
	})
}

// runBounded runs cmd to its end, killing it after timeout: a start-up
// error must never be a hang.
func runBounded(cmd *exec.Cmd, timeout time.Duration) (string, error) {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("still running after %s", timeout)
	}
}

// TestClusterAPIServerKilledMidSuspend: kill -9 of the API server while a
// suspend is under way (the node goes on checkpointing and uploading for
// a workflow that no longer exists). After the restart the nodes
// re-register with their actors, the actor resumes from its last
// complete snapshot (the interrupted suspend's, once committed), and
// garbage collection leaves no object in the bucket that no record
// points at.
func TestClusterAPIServerKilledMidSuspend(t *testing.T) {
	c := startCluster(t, "node-a")
	c.counterActor()
	c.in.ate("suspend", "actor", "counter-1") // last complete snapshot: count=1
	c.in.mustCount("default/counter-1", 2)
	suspend := exec.Command(ateBin, "suspend", "actor", "counter-1")
	suspend.Env = append(suspend.Environ(), "ATE_CONFIG="+filepath.Join(c.in.dataDir, "config.yaml"))
	if err := suspend.Start(); err != nil {
		t.Fatal(err)
	}
	var state string
	waitFor(t, "the suspend under way", 10*time.Second, func() bool {
		state = c.in.actor("counter-1").GetState().String()
		return state != "RUNNING"
	})
	c.api.kill()
	// SUSPENDING is what this test is for; a suspend fast enough to have
	// committed between two polls still checks the rest.
	t.Logf("API server killed with the actor %s", state)
	_ = suspend.Wait()
	c.api.start("ate apiserver ready")
	waitFor(t, "node-a registered again", 15*time.Second, func() bool { return c.nodePhase("node-a") == atev1.Node_READY })
	// The request settles the interrupted suspend first: it adopts the
	// snapshot the node committed for the dead workflow (the record names
	// it as pending, so it is not garbage until then), or rolls back.
	code, body := c.in.get("default/counter-1", "/")
	if code != 200 || (strings.TrimSpace(body) != "count=2" && strings.TrimSpace(body) != "count=3") {
		t.Fatalf("after the API server restart GET = %d %q, want the count from a complete snapshot (2, or 3 if the suspend had committed)", code, body)
	}
	ctx := context.Background()
	referenced := func() map[string]bool {
		live := map[string]bool{}
		a := c.in.actor("counter-1")
		live[snapshot.Bare(a.GetSnapshot())] = true
		tpl, err := c.in.client.GetActorTemplate(ctx, &atev1.GetActorTemplateRequest{Atespace: "default", Name: "counter"})
		if err != nil {
			t.Fatal(err)
		}
		live[snapshot.Bare(tpl.GetStatus().GetGoldenSnapshot())] = true
		return live
	}
	waitFor(t, "no unreferenced snapshot object in the bucket", 30*time.Second, func() bool {
		keys, err := c.s3.Keys(ctx, "e2e/")
		if err != nil {
			t.Fatal(err)
		}
		live := referenced()
		for _, k := range keys {
			rest := strings.TrimPrefix(k, "e2e/")
			parts := strings.SplitN(rest, "/", 3)
			if len(parts) < 3 || !live[parts[0]+"/"+parts[1]] {
				return false
			}
		}
		return true
	})
}

// TestClusterRouterRestartWhileNodeDrains: 50 requests for five suspended
// actors park in the router (two workers in all); while they wait, the
// node hosting one of them drains away and the router is restarted
// (SIGTERM: it stops accepting and lets its parked requests finish; a new
// router takes the same address). Every request is answered 200 by the
// actor it was for, and the counts show none was lost or served twice.
func TestClusterRouterRestartWhileNodeDrains(t *testing.T) {
	c := startCluster(t, "node-a", "node-b")
	c.in.createTemplate("test/e2e/testdata/counter.yaml", "counter")
	const actors, requests = 5, 50
	for i := range actors {
		c.in.ate("create", "actor", fmt.Sprintf("c%d", i), "--template", "counter")
	}
	type answer struct {
		actor, body string
		code        int
		err         error
	}
	answers := make(chan answer, requests)
	for i := range requests {
		actor := fmt.Sprintf("default/c%d", i%actors)
		go func() {
			code, body, _, err := c.in.request(http.MethodGet, actor, "/", "")
			answers <- answer{actor, strings.TrimSpace(body), code, err}
		}()
	}
	// Some actor is running on node-a with requests still parked for the
	// others (at most two actors run at once).
	running := func() (onA string) {
		for i := range actors {
			if name := fmt.Sprintf("c%d", i); c.nodeOf(name) == "node-a" {
				return name
			}
		}
		return ""
	}
	waitFor(t, "an actor running on node-a", 60*time.Second, func() bool { return running() != "" })
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		c.nodes["node-a"].terminate(60 * time.Second)
	}()
	old := c.router
	if answered := len(answers); answered >= requests {
		t.Fatalf("all %d requests were answered before the restart: nothing was parked", answered)
	} else {
		t.Logf("restarting the router with %d of %d requests unanswered", requests-answered, requests)
	}
	old.terminate(60 * time.Second)
	c.router, _ = startComponent(t, "router (restarted)", "ate router ready", old.args...)
	<-drained

	counts := map[string][]int{}
	for range requests {
		a := <-answers
		if a.err != nil || a.code != http.StatusOK {
			t.Errorf("GET %s: %d %q %v: dropped", a.actor, a.code, a.body, a.err)
			continue
		}
		var n int
		if _, err := fmt.Sscanf(a.body, "count=%d", &n); err != nil {
			t.Errorf("GET %s: body %q", a.actor, a.body)
			continue
		}
		counts[a.actor] = append(counts[a.actor], n)
	}
	for actor, ns := range counts {
		slices.Sort(ns)
		for i, n := range ns {
			if n != i+1 {
				t.Errorf("%s answered counts %v: want 1..%d, each once (memory kept across the moves)", actor, ns, len(ns))
				break
			}
		}
	}
	// The new router serves at the old address.
	c.in.mustCount("default/c0", len(counts["default/c0"])+1)
	if c.nodePhase("node-a") != atev1.Node_LOST {
		t.Errorf("drained node-a is %s, want LOST (left)", c.nodePhase("node-a"))
	}
}

// TestClusterPausedOnLostNode: an actor paused on a node (its checkpoint
// on that node's disk) whose node is then killed resumes on the other
// node from its last durable snapshot, and its message says the work
// since then was lost.
func TestClusterPausedOnLostNode(t *testing.T) {
	c := startCluster(t, "node-a", "node-b")
	c.counterActor()
	c.in.ate("suspend", "actor", "counter-1") // durable: count=1
	c.in.mustCount("default/counter-1", 2)
	on := c.nodeOf("counter-1")
	c.in.ate("pause", "actor", "counter-1") // paused on `on`: count=2
	if st := c.in.actor("counter-1").GetState().String(); st != "PAUSED" {
		t.Fatalf("state after pause = %s", st)
	}
	c.nodes[on].kill()
	waitFor(t, "node "+on+" lost", 15*time.Second, func() bool { return c.nodePhase(on) == atev1.Node_LOST })
	c.in.mustCount("default/counter-1", 2) // from the durable count=1: the paused work is gone
	if got := c.nodeOf("counter-1"); got != other(on) {
		t.Fatalf("resumed on %q, want %s", got, other(on))
	}
	if msg := c.in.actor("counter-1").GetMessage(); !strings.Contains(msg, on) || !strings.Contains(msg, "lost") {
		t.Fatalf("message %q does not say the paused checkpoint's node %s is gone and work was lost", msg, on)
	}
}

// TestClusterAPIServerRestartKeepsActors: the API server is killed and
// restarted; the nodes re-register and the actors they run keep running
// with their memory: nothing is crashed or stopped.
func TestClusterAPIServerRestartKeepsActors(t *testing.T) {
	c := startCluster(t, "node-a", "node-b")
	c.counterActor()
	c.in.mustCount("default/counter-1", 2)
	on := c.nodeOf("counter-1")
	c.api.kill()
	c.api.start("ate apiserver ready")
	waitFor(t, "both nodes registered again", 15*time.Second, func() bool {
		return c.nodePhase("node-a") == atev1.Node_READY && c.nodePhase("node-b") == atev1.Node_READY
	})
	if st := c.in.actor("counter-1").GetState().String(); st != "RUNNING" {
		t.Fatalf("after the API server restart the actor is %s (%s), want RUNNING", st, c.in.actor("counter-1").GetMessage())
	}
	c.in.mustCount("default/counter-1", 3) // the memory survived
	if got := c.nodeOf("counter-1"); got != on {
		t.Fatalf("actor moved from %s to %q", on, got)
	}
}

// TestClusterDrainUploadsPaused: a node that drains (SIGTERM) with an
// actor paused on its disk uploads the checkpoint before it leaves: the
// actor resumes on the other node with its memory.
func TestClusterDrainUploadsPaused(t *testing.T) {
	c := startCluster(t, "node-a", "node-b")
	c.counterActor()
	c.in.mustCount("default/counter-1", 2)
	on := c.nodeOf("counter-1")
	c.in.ate("pause", "actor", "counter-1")
	c.nodes[on].terminate(60 * time.Second)
	if st := c.in.actor("counter-1").GetState().String(); st != "SUSPENDED" {
		t.Fatalf("after its node drained the paused actor is %s (%s), want SUSPENDED", st, c.in.actor("counter-1").GetMessage())
	}
	c.in.mustCount("default/counter-1", 3)
	if got := c.nodeOf("counter-1"); got != other(on) {
		t.Fatalf("resumed on %q, want %s", got, other(on))
	}
}

// TestClusterNodeStopWithoutAPIServer: a node asked to stop while the API
// server is away cannot have its actors put away; it says so and exits
// non-zero instead of reporting a clean stop.
func TestClusterNodeStopWithoutAPIServer(t *testing.T) {
	c := startCluster(t)
	c.startNode("node-a", c.in.apiAddr, "--drain-timeout", "2s")
	c.counterActor()
	c.api.kill()
	err := c.nodes["node-a"].stop(60 * time.Second)
	if err == nil {
		t.Fatal("the node stopped cleanly with an actor it could not put away")
	}
	if log := c.nodes["node-a"].logText(); !strings.Contains(log, "drain failed") || !strings.Contains(log, "lose their memory") {
		t.Fatalf("the node's log does not say what was lost:\n%s", log)
	}
}

// TestClusterActorBeforeGoldenIsReady: an actor created and requested
// while its template's golden snapshot is still being built (an API
// server, two nodes, S3) starts cold and keeps its state across the
// build's end: every count one more than the last, the actor RUNNING
// throughout, then suspended and resumed from its own snapshot. (One
// real-cluster run of about ten once saw such an actor turn CRASHED
// right after its second answer; issue 32.)
func TestClusterActorBeforeGoldenIsReady(t *testing.T) {
	c := startCluster(t, "node-a", "node-b")
	c.in.ate("create", "template", "-f", filepath.Join(repoDir, "test/e2e/testdata/counter.yaml"))
	c.in.ate("create", "actor", "counter-1", "--template", "counter")
	ready := func() bool {
		tpl, err := c.in.client.GetActorTemplate(context.Background(), &atev1.GetActorTemplateRequest{Atespace: "default", Name: "counter"})
		if err != nil {
			t.Fatal(err)
		}
		return tpl.GetStatus().GetPhase() == atev1.ActorTemplateStatus_READY
	}
	before, n := 0, 0
	check := func(when string) {
		t.Helper()
		got, err := c.in.count("default/counter-1")
		if err != nil {
			t.Fatalf("%s: %v (actor %s)", when, err, c.in.actor("counter-1").GetMessage())
		}
		if got != n+1 {
			t.Fatalf("%s: count=%d after count=%d", when, got, n)
		}
		n = got
		if a := c.in.actor("counter-1"); a.GetState() != atev1.ActorState_RUNNING {
			t.Fatalf("%s: actor %s (%s) after answering count=%d", when, a.GetState(), a.GetMessage(), n)
		}
	}
	for !ready() {
		check("while the golden snapshot was built")
		before++
		if before > 5000 {
			t.Fatal("the golden build did not end within 5000 requests")
		}
	}
	if before == 0 {
		t.Fatal("the golden snapshot was ready before the first request: the test did not cover its path")
	}
	for range 20 {
		check("after the golden snapshot was ready")
	}
	c.in.ate("suspend", "actor", "counter-1")
	check("resumed from its own snapshot")
	t.Logf("%d requests while the golden snapshot was built, %d in all", before, n)
}
