package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/snapshot/s3/s3test"
)

var (
	chaosSeeds    = flag.String("chaos.seeds", "1,2", "TestChaos: comma-separated seeds, one run each; a seed picks the faults, their targets and lengths, so a failing seed replays its schedule")
	chaosDuration = flag.Duration("chaos.duration", 70*time.Second, "TestChaos: how long each seed's run injects faults")
	chaosKinds    = flag.String("chaos.faults", "", "TestChaos: comma-separated fault kinds to draw from (as the report names them; default every kind)")
)

// TestChaos is the fault-injection harness: two API server replicas
// over PostgreSQL, two nodes and a router, each a process in a network
// namespace of its own (chaosNet), PostgreSQL and SeaweedFS on the
// machine, while clients send requests to counter actors throughout and
// a suspender checkpoints them now and then. From a seed it injects one
// fault after another — partitions between a node and the replicas
// (partial, full, one-way either way), the router and a replica or a
// node (and one-way node→router), a replica and PostgreSQL, a node and
// S3; kill -9, SIGSTOP, a
// PostgreSQL restart, S3 errors and latency — each for a few seconds,
// then heals it and waits until every actor has served a request sent
// after the heal.
//
// Then porcupine checks each actor's history against a counter: every
// acknowledged count is unique and, when one response completed before
// another request began, the first count is lower. Failed requests may
// leave gaps (the actor may have counted them). The one exception is a
// fault that can make a node lost (kill -9, SIGSTOP or isolation of a
// node): its actors are restored from their last durable snapshot, so
// during it an actor's count may go back once — not twice, so two
// copies answering in turn are still a violation.
//
// It fails on a violation, an actor not serving within 90 s of a heal,
// or a failed request (a request must wait a fault out within its park
// budget: every fault is shorter than it).
func TestChaos(t *testing.T) {
	for _, s := range strings.Split(*chaosSeeds, ",") {
		seed, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			t.Fatalf("-chaos.seeds %q: %v", *chaosSeeds, err)
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := startChaos(t)
			r.run(seed, *chaosDuration).check(t)
		})
	}
}

// chaosRig is the cluster TestChaos injects faults into: every component
// in a network namespace of its own on one bridge (chaosNet); PostgreSQL
// and the S3 server on this machine's loopback, reached through a
// forwarder and the S3 fault proxy at the bridge's address.
type chaosRig struct {
	*cluster
	net   *chaosNet
	pg    interface{ Restart(context.Context) error }
	s3    *s3Fault
	apis  [2]*component
	addrs [2]string
	nodes []string
	// hosts are the components' namespaces, by component name
	// ("apiserver-0", "node-a", "router"); pgPort and s3Port are where
	// PostgreSQL's forwarder and the S3 fault proxy listen on the bridge
	// (the ports a cut from those services names).
	hosts          map[string]*chaosHost
	pgPort, s3Port int
	actors         []string
	// replica[i] talks to apis[i] alone.
	replica [2]atev1.ControlClient
}

// The ports components listen on. Fixed, since each namespace has ports
// of its own, so a restarted node advertises the address it had.
const (
	chaosAPIPort    = 7000
	chaosAgentPort  = 7001
	chaosTunnelPort = 7002
	chaosRouterPort = 7003
)

func portOf(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func startChaos(t *testing.T) *chaosRig {
	t.Helper()
	return startChaosWith(t, nil)
}

// replicaHost is replica i's namespace (hosts names it apiserver-i, as
// its log does).
func (r *chaosRig) replicaHost(i int) *chaosHost { return r.hosts[fmt.Sprintf("apiserver-%d", i)] }

// startChaosWith is startChaos with env added to the environment of the
// components it names ("apiserver-0", "node-a", "router"…).
func startChaosWith(t *testing.T, env map[string][]string) *chaosRig {
	t.Helper()
	// First, so that its cleanup (namespaces, bridge) runs after the
	// components'.
	cn := newChaosNet(t)
	s3 := s3test.New(t)
	r := &chaosRig{
		cluster: &cluster{t: t, s3: s3, nodes: map[string]*component{}, dir: t.TempDir()},
		net:     cn, s3: startS3Fault(t, cn.gw.addr(0), s3.Endpoint),
		nodes: []string{"node-a", "node-b"}, hosts: map[string]*chaosHost{},
	}
	r.s3Port = portOf(t, r.s3.addr())
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	// Every component reaches S3 through the fault proxy.
	r.snaps = strings.Replace(s3.URL("e2e"), url.QueryEscape("http://"+s3.Endpoint), url.QueryEscape("http://"+r.s3.addr()), 1)
	pg := sharedPostgres(t)
	r.pg = pg
	// The shared server listens on loopback, which the namespaces do not
	// share: a forwarder on the bridge carries their connections.
	fwd := startForwarder(t, cn.gw.addr(0), pg.Addr())
	r.pgPort = portOf(t, fwd.addr())
	db := strings.Replace(pg.NewDatabase(t), pg.Addr(), fwd.addr(), 1)
	for _, name := range []string{"apiserver-0", "apiserver-1", "node-a", "node-b", "router"} {
		r.hosts[name] = cn.add(name)
	}
	// withTLS's certificates, also naming the address each component
	// is reached at.
	tlsDir := func(host, component, name string) string {
		return issueCert(t, caDir, component, name, "--ip", r.hosts[host].ip)
	}
	addrs := &r.addrs
	for i := range r.apis {
		name := fmt.Sprintf("apiserver-%d", i)
		addrs[i] = r.hosts[name].addr(chaosAPIPort)
		r.apis[i] = launchComponentIn(t, env[name], r.hosts[name], name, "ate apiserver ready",
			append([]string{"apiserver", "--data-dir", filepath.Join(r.dir, fmt.Sprintf("api%d", i)), "--listen", addrs[i], "--store", db,
				"--snapshots", r.snaps, "--log-level", "debug", "--tls-dir", tlsDir(name, "apiserver", "apiserver")}, haTiming...)...)
	}
	for _, api := range r.apis {
		api.waitReady()
	}
	r.api = r.apis[0]
	for _, n := range r.nodes {
		h := r.hosts[n]
		r.cluster.nodes[n] = launchComponentIn(t, env[n], h, "node "+n, "ate node ready", "node",
			"--api", addrs[0]+","+addrs[1], "--name", n, "--labels", "node="+n,
			"--worker-prefix", r.workerPrefix(n), "--data-dir", filepath.Join(r.dir, n), "--workers", "4",
			"--advertise", h.ip, "--agent-port", fmt.Sprint(chaosAgentPort), "--tunnel-port", fmt.Sprint(chaosTunnelPort),
			"--snapshots", r.snaps, "--log-level", "debug", "--tls-dir", tlsDir(n, "node", n))
	}
	for _, n := range r.nodes {
		r.cluster.nodes[n].waitReady()
	}
	r.router = launchComponentIn(t, env["router"], r.hosts["router"], "router", "ate router ready", "router",
		"--api", addrs[0]+","+addrs[1], "--listen", r.hosts["router"].addr(chaosRouterPort), "--drain-delay", "0s", "--log-level", "debug",
		"--tls-dir", tlsDir("router", "router", "router"))
	fields := r.router.waitReady()
	r.in, r.replica = dialReplicas(t, r.dir, r.addrs, fields["router"].(string))
	r.in.counterTemplate("chaos", nil, "")
	for i := range 4 {
		name := fmt.Sprintf("chaos-%d", i)
		r.in.ate("create", "actor", name, "--template", "chaos")
		r.actors = append(r.actors, name)
	}
	return r
}

// s3Fault is an HTTP proxy in front of the S3 server that, while told
// to, answers a share of requests 503 SlowDown (as S3 does when
// throttling) and delays the others: faults of the object store itself,
// which dropping packets cannot make.
type s3Fault struct {
	ln      net.Listener
	srv     *http.Server
	mu      sync.Mutex
	errRate float64
	delay   time.Duration
	rng     *rand.Rand
	errors  atomic.Int64
}

func startS3Fault(t testing.TB, listen, endpoint string) *s3Fault {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	target := &url.URL{Scheme: "http", Host: endpoint}
	f := &s3Fault{ln: ln, rng: rand.New(rand.NewPCG(1, 2))}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		// The client signed the host it dialled.
		pr.Out.Host = pr.In.Host
	}}
	f.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		f.mu.Lock()
		fail, delay := f.errRate > 0 && f.rng.Float64() < f.errRate, f.delay
		f.mu.Unlock()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-req.Context().Done():
				return
			}
		}
		if fail {
			f.errors.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
			return
		}
		proxy.ServeHTTP(w, req)
	})}
	go func() { _ = f.srv.Serve(ln) }()
	t.Cleanup(func() { _ = f.srv.Close() })
	return f
}

func (f *s3Fault) addr() string { return f.ln.Addr().String() }

func (f *s3Fault) set(errRate float64, delay time.Duration) {
	f.mu.Lock()
	f.errRate, f.delay = errRate, delay
	f.mu.Unlock()
}

// chaosFault is one kind of fault: inject starts it on targets the
// seed's rng picks and returns what it did and how to heal it.
type chaosFault struct {
	kind string
	// nodeLoss: the fault may make a node lost, so actors may restart
	// from their last durable snapshot.
	nodeLoss bool
	inject   func(r *chaosRig, rng *rand.Rand, key string, length time.Duration) (what string, heal func())
}

func (r *chaosRig) signal(c *component, sig syscall.Signal) {
	r.t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("%s %s: %v", sig, c.name, err)
	}
}

var chaosFaults = []chaosFault{
	{kind: "partial partition node–replica", inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		n, i := r.nodes[rng.IntN(2)], rng.IntN(2)
		r.net.cut(key, r.hosts[n], r.replicaHost(i))
		return fmt.Sprintf("%s cut off from replica %d", n, i), func() { r.net.heal(key) }
	}},
	{kind: "full partition node–replicas", nodeLoss: true, inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		n := r.nodes[rng.IntN(2)]
		for i := range 2 {
			r.net.cut(key, r.hosts[n], r.replicaHost(i))
		}
		return n + " cut off from both replicas", func() { r.net.heal(key) }
	}},
	{kind: "one-way node→replicas dropped", nodeLoss: true, inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		n := r.nodes[rng.IntN(2)]
		for i := range 2 {
			r.net.drop(key, r.replicaHost(i), r.hosts[n], false, 0)
		}
		return n + "'s packets to the replicas dropped", func() { r.net.heal(key) }
	}},
	{kind: "one-way replicas→node dropped", nodeLoss: true, inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		n := r.nodes[rng.IntN(2)]
		for i := range 2 {
			r.net.drop(key, r.hosts[n], r.replicaHost(i), false, 0)
		}
		return "the replicas' packets to " + n + " dropped", func() { r.net.heal(key) }
	}},
	{kind: "partition router–replica", inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		i := rng.IntN(2)
		r.net.cut(key, r.hosts["router"], r.replicaHost(i))
		return fmt.Sprintf("router cut off from replica %d", i), func() { r.net.heal(key) }
	}},
	{kind: "partition router–node", inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		n := r.nodes[rng.IntN(2)]
		r.net.cut(key, r.hosts["router"], r.hosts[n])
		return "router cut off from " + n, func() { r.net.heal(key) }
	}},
	{kind: "one-way node→router dropped", inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		n := r.nodes[rng.IntN(2)]
		r.net.drop(key, r.hosts["router"], r.hosts[n], false, 0)
		return n + "'s packets to the router dropped", func() { r.net.heal(key) }
	}},
	{kind: "partition replica–postgres", inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		i := rng.IntN(2)
		r.net.cutService(key, r.replicaHost(i), r.pgPort)
		return fmt.Sprintf("replica %d cut off from PostgreSQL", i), func() { r.net.heal(key) }
	}},
	{kind: "partition node–S3", inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		n := r.nodes[rng.IntN(2)]
		r.net.cutService(key, r.hosts[n], r.s3Port)
		return n + " cut off from S3", func() { r.net.heal(key) }
	}},
	{kind: "kill -9 replica", inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		i := rng.IntN(2)
		r.apis[i].kill()
		return fmt.Sprintf("replica %d killed", i), func() { r.apis[i].start("ate apiserver ready") }
	}},
	{kind: "kill -9 node", nodeLoss: true, inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		n := r.nodes[rng.IntN(2)]
		r.cluster.nodes[n].kill()
		return n + " killed", func() { r.cluster.nodes[n].start("ate node ready") }
	}},
	{kind: "SIGSTOP replica", inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		i := rng.IntN(2)
		r.signal(r.apis[i], syscall.SIGSTOP)
		return fmt.Sprintf("replica %d stopped", i), func() { r.signal(r.apis[i], syscall.SIGCONT) }
	}},
	{kind: "SIGSTOP node", nodeLoss: true, inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		n := r.nodes[rng.IntN(2)]
		r.signal(r.cluster.nodes[n], syscall.SIGSTOP)
		return n + " stopped", func() { r.signal(r.cluster.nodes[n], syscall.SIGCONT) }
	}},
	{kind: "SIGSTOP router", inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		r.signal(r.router, syscall.SIGSTOP)
		return "router stopped", func() { r.signal(r.router, syscall.SIGCONT) }
	}},
	{kind: "restart PostgreSQL", inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.pg.Restart(ctx); err != nil {
			r.t.Fatalf("restart PostgreSQL: %v", err)
		}
		return "PostgreSQL restarted", func() {}
	}},
	{kind: "S3 errors", inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		r.s3.set(0.5, 0)
		return "half of S3's answers 503 SlowDown", func() { r.s3.set(0, 0) }
	}},
	{kind: "S3 latency", inject: func(r *chaosRig, rng *rand.Rand, key string, _ time.Duration) (string, func()) {
		d := time.Duration(200+rng.IntN(1300)) * time.Millisecond
		r.s3.set(0, d)
		return fmt.Sprintf("S3 answers %s late", d), func() { r.s3.set(0, 0) }
	}},
}

// chaosInput is an operation's input: a request to the counter, or a
// window in which a node may have been lost (crash).
type chaosInput struct{ crash bool }

// anyCount is the model's state after a crash: the next count may be
// any (the actor restarted from a snapshot of unknown count).
const anyCount = -1

var counterModel = porcupine.Model{
	Init: func() any { return 0 },
	Step: func(state, input, output any) (bool, any) {
		if input.(chaosInput).crash {
			return true, anyCount
		}
		s, n := state.(int), output.(int)
		return s == anyCount || n > s, n
	},
	DescribeOperation: func(input, output any) string {
		if input.(chaosInput).crash {
			return "node may be lost"
		}
		return fmt.Sprintf("count=%d", output)
	},
}

// chaosHistory is what the clients saw.
type chaosHistory struct {
	start time.Time

	mu           sync.Mutex
	ops          map[string][]porcupine.Operation
	lastOK       map[string]time.Time // call time of each actor's latest answered request
	sent, served int
	failures     map[string]int
	firstFailure string
	suspends     map[string]int
	// slowest is the longest request since the last reset.
	slowest time.Duration
}

func (h *chaosHistory) at(t time.Time) int64 { return int64(t.Sub(h.start)) }

type faultStats struct {
	injected int
	// longestRequest is the longest any request took while the fault
	// was on or being recovered from; recovery the longest from a heal
	// until every actor had answered a request sent after it.
	longestRequest, recovery time.Duration
}

type chaosReport struct {
	seed         uint64
	ran          time.Duration
	faults       map[string]*faultStats
	sent, served int
	failures     map[string]int
	firstFailure string
	suspends     map[string]int
	s3Errors     int64
	violations   []string
	wedged       []string
}

// check logs the report and fails t on a violation, a wedged actor or a
// failed request.
func (c *chaosReport) check(t *testing.T) {
	t.Helper()
	t.Log(c.String())
	if v := c.violations; len(v) > 0 {
		t.Errorf("%d history violations (seed %d replays the schedule):\n%s", len(v), c.seed, strings.Join(v, "\n"))
	}
	if len(c.wedged) > 0 {
		t.Errorf("actors not serving after a heal: %s", strings.Join(c.wedged, "; "))
	}
	if n := c.failedRequests(); n > 0 {
		t.Errorf("%d requests failed: %v; first: %s", n, c.failures, c.firstFailure)
	}
}

func (c *chaosReport) failedRequests() int {
	n := 0
	for _, v := range c.failures {
		n += v
	}
	return n
}

func (c *chaosReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos seed %d: %s of faults; %d requests sent, %d answered 200, failed %v; suspends %v; S3 503s injected %d; violations %d, actors wedged %d\n",
		c.seed, c.ran.Round(time.Second), c.sent, c.served, c.failures, c.suspends, c.s3Errors, len(c.violations), len(c.wedged))
	kinds := slices.Sorted(func(yield func(string) bool) {
		for k := range c.faults {
			if !yield(k) {
				return
			}
		}
	})
	fmt.Fprintf(&b, "%-32s %8s %16s %14s\n", "fault", "injected", "longest request", "recovery")
	for _, k := range kinds {
		s := c.faults[k]
		fmt.Fprintf(&b, "%-32s %8d %16s %14s\n", k, s.injected, s.longestRequest.Round(time.Millisecond), s.recovery.Round(time.Millisecond))
	}
	return b.String()
}

// run sends load and injects faults chosen from seed for d, then checks
// the history.
func (r *chaosRig) run(seed uint64, d time.Duration) *chaosReport {
	return r.runFaults(seed, d, *chaosKinds)
}

// runFaults is run drawing from the fault kinds named in kinds
// (comma-separated; "": every kind).
func (r *chaosRig) runFaults(seed uint64, d time.Duration, kinds string) *chaosReport {
	t := r.t
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := &chaosHistory{start: time.Now(), ops: map[string][]porcupine.Operation{}, lastOK: map[string]time.Time{},
		failures: map[string]int{}, suspends: map[string]int{}}
	done := make(chan struct{})
	var load sync.WaitGroup
	client := 0
	for _, a := range r.actors {
		for range 2 {
			id := client
			client++
			repeat(&load, done, func() { r.request(h, id, a) })
		}
	}
	// The suspender: now and then an actor is checkpointed, so restores
	// come from S3 and a lost node's actors from a recent snapshot.
	load.Go(func() {
		srng := rand.New(rand.NewPCG(seed, 7))
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Duration(1000+srng.IntN(2000)) * time.Millisecond): // the load's pace, not a wait for anything
			}
			a := r.actors[srng.IntN(len(r.actors))]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, err := r.in.client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: a})
			cancel()
			h.mu.Lock()
			h.suspends[status.Code(err).String()]++
			h.mu.Unlock()
		}
	})
	report := &chaosReport{seed: seed, faults: map[string]*faultStats{}}
	// Every actor serves before the first fault.
	if wedged := r.recovered(h, time.Now(), 90*time.Second); len(wedged) > 0 {
		t.Fatalf("actors not serving before any fault: %v", wedged)
	}
	faults := chaosFaults
	if kinds != "" {
		faults = nil
		for _, k := range strings.Split(kinds, ",") {
			i := slices.IndexFunc(chaosFaults, func(f chaosFault) bool { return f.kind == strings.TrimSpace(k) })
			if i < 0 {
				t.Fatalf("-chaos.faults: no fault kind %q", k)
			}
			faults = append(faults, chaosFaults[i])
		}
	}
	var crashes []porcupine.Operation
	begin := time.Now()
	for no := 0; time.Since(begin) < d; no++ {
		f := faults[rng.IntN(len(faults))]
		length := time.Duration(2000+rng.IntN(8000)) * time.Millisecond
		h.mu.Lock()
		h.slowest = 0
		h.mu.Unlock()
		key := fmt.Sprintf("fault%d", no)
		injected := time.Now()
		what, heal := f.inject(r, rng, key, length)
		t.Logf("%.1fs: %s: %s for %s", injected.Sub(h.start).Seconds(), f.kind, what, length)
		<-time.After(length) // the fault's length, drawn from the seed: not a wait for anything
		heal()
		healed := time.Now()
		wedged := r.recovered(h, healed, 90*time.Second)
		recovered := time.Now()
		for _, a := range wedged {
			report.wedged = append(report.wedged, fmt.Sprintf("%s after %s (%s)", a, f.kind, what))
		}
		if f.nodeLoss {
			crashes = append(crashes, porcupine.Operation{Input: chaosInput{crash: true}, Call: h.at(injected), Return: h.at(recovered)})
		}
		s := report.faults[f.kind]
		if s == nil {
			s = &faultStats{}
			report.faults[f.kind] = s
		}
		s.injected++
		h.mu.Lock()
		s.longestRequest = max(s.longestRequest, h.slowest)
		h.mu.Unlock()
		s.recovery = max(s.recovery, recovered.Sub(healed))
		if len(wedged) > 0 {
			break
		}
		<-time.After(time.Duration(500+rng.IntN(1500)) * time.Millisecond) // calm between faults, drawn from the seed
	}
	report.ran = time.Since(begin)
	close(done)
	load.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	report.sent, report.served, report.failures, report.firstFailure, report.suspends = h.sent, h.served, h.failures, h.firstFailure, h.suspends
	report.s3Errors = r.s3.errors.Load()
	for _, a := range r.actors {
		ops := append(slices.Clone(h.ops[a]), crashes...)
		res, info := porcupine.CheckOperationsVerbose(counterModel, ops, 2*time.Minute)
		switch res {
		case porcupine.Illegal:
			report.violations = append(report.violations, fmt.Sprintf("%s: not a counter's history (%d requests, %d node-loss windows): %s", a, len(h.ops[a]), len(crashes), r.explain(h, a, ops, info)))
		case porcupine.Unknown:
			t.Logf("%s: the checker timed out on %d operations", a, len(ops))
		}
	}
	return report
}

// explain writes porcupine's visualisation of a violation to a file
// kept after the test and names it, with the evidence: answers whose
// count is not above one answered before they were sent, outside any
// node-loss window, and counts answered twice.
func (r *chaosRig) explain(h *chaosHistory, actor string, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var b strings.Builder
	if f, err := os.CreateTemp("", "ate-chaos-"+actor+"-*.html"); err == nil {
		if err := porcupine.Visualize(counterModel, info, f); err == nil {
			fmt.Fprintf(&b, "visualised in %s; ", f.Name())
		}
		f.Close()
	}
	var answers, losses []porcupine.Operation
	for _, o := range ops {
		if o.Input.(chaosInput).crash {
			losses = append(losses, o)
		} else {
			answers = append(answers, o)
		}
	}
	at := func(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }
	byReturn := slices.Clone(answers)
	slices.SortFunc(byReturn, func(a, b porcupine.Operation) int { return cmp.Compare(a.Return, b.Return) })
	// best[i] is the answer with the highest count among byReturn[:i+1].
	best := make([]porcupine.Operation, len(byReturn))
	for i, o := range byReturn {
		best[i] = o
		if i > 0 && best[i-1].Output.(int) >= o.Output.(int) {
			best[i] = best[i-1]
		}
	}
	found := 0
	for _, o := range answers {
		k, _ := slices.BinarySearchFunc(byReturn, o.Call, func(x porcupine.Operation, call int64) int { return cmp.Compare(x.Return, call) })
		if k == 0 {
			continue
		}
		p := best[k-1]
		if p.Output.(int) < o.Output.(int) {
			continue
		}
		excused := slices.ContainsFunc(losses, func(l porcupine.Operation) bool { return l.Call <= o.Call && l.Return >= p.Return })
		if excused || found >= 3 {
			continue
		}
		found++
		fmt.Fprintf(&b, "count=%d (client %d, sent %s, answered %s) after count=%d (client %d, answered %s) outside a node's loss; ",
			o.Output, o.ClientId, at(o.Call), at(o.Return), p.Output, p.ClientId, at(p.Return))
	}
	seen := map[int]porcupine.Operation{}
	dups := 0
	for _, o := range answers {
		if q, ok := seen[o.Output.(int)]; ok && dups < 3 {
			dups++
			fmt.Fprintf(&b, "count=%d answered twice (client %d at %s, client %d at %s); ", o.Output, q.ClientId, at(q.Return), o.ClientId, at(o.Return))
		}
		seen[o.Output.(int)] = o
	}
	for _, l := range losses {
		fmt.Fprintf(&b, "[node-loss window %s–%s] ", at(l.Call), at(l.Return))
	}
	b.WriteString(r.lossRecords(h, actor))
	return b.String()
}

// lossRecords lists what the replicas logged that can take an actor's
// count back: a node declared lost, the actor CRASHED or rolled back to
// an older snapshot, timed from the run's start, so that a violation's
// report says whether one happened outside a fault that may cause it.
func (r *chaosRig) lossRecords(h *chaosHistory, actor string) string {
	var b strings.Builder
	n := 0
	for i, api := range r.apis {
		for line := range strings.Lines(api.logText()) {
			var rec struct {
				Time  time.Time `json:"time"`
				Msg   string    `json:"msg"`
				Node  string    `json:"node"`
				Why   string    `json:"why"`
				State string    `json:"state"`
				Actor struct {
					Name string `json:"name"`
				} `json:"actor"`
			}
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			var what string
			switch {
			case rec.Msg == "node lost":
				what = fmt.Sprintf("node %s lost (%s)", rec.Node, rec.Why)
			case rec.Actor.Name != actor:
				continue
			case rec.State == "CRASHED", strings.Contains(rec.Msg, "roll"):
				what = fmt.Sprintf("%s: %s %s", actor, rec.Msg, rec.State)
			default:
				continue
			}
			if n++; n > 12 {
				b.WriteString("…; ")
				return b.String()
			}
			fmt.Fprintf(&b, "replica %d at %.3fs: %s; ", i, rec.Time.Sub(h.start).Seconds(), what)
		}
	}
	return b.String()
}

// request sends one request for actor and records it.
func (r *chaosRig) request(h *chaosHistory, client int, actor string) {
	call := time.Now()
	code, body, _, err := r.in.request(http.MethodGet, "default/"+actor, "/", "")
	ret := time.Now()
	took := ret.Sub(call)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent++
	h.slowest = max(h.slowest, took)
	var n int
	if err == nil && code == http.StatusOK {
		if _, serr := fmt.Sscanf(strings.TrimSpace(body), "count=%d", &n); serr == nil {
			h.served++
			h.ops[actor] = append(h.ops[actor], porcupine.Operation{ClientId: client, Input: chaosInput{}, Call: h.at(call), Output: n, Return: h.at(ret)})
			h.lastOK[actor] = call
			return
		}
	}
	why := fmt.Sprintf("HTTP %d", code)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		why = "client timeout"
	case err != nil:
		why = "connection error"
	}
	h.failures[why]++
	if h.firstFailure == "" {
		h.firstFailure = fmt.Sprintf("%s at %.1fs after %s: %d %q (%v)", actor, call.Sub(h.start).Seconds(), took.Round(time.Millisecond), code, strings.TrimSpace(body), err)
	}
}

// recovered waits until every actor has answered a request sent after
// since, for up to timeout, and returns those that did not.
func (r *chaosRig) recovered(h *chaosHistory, since time.Time, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		var waiting []string
		h.mu.Lock()
		for _, a := range r.actors {
			if !h.lastOK[a].After(since) {
				waiting = append(waiting, a)
			}
		}
		h.mu.Unlock()
		if len(waiting) == 0 || time.Now().After(deadline) {
			if len(waiting) > 0 {
				r.t.Logf("not served since the heal: %v", waiting)
				for _, a := range waiting {
					if x, err := r.in.client.GetActor(context.Background(), &atev1.GetActorRequest{Atespace: "default", Name: a}); err == nil {
						r.t.Logf("%s: %s on %q: %s", a, x.GetState(), x.GetWorker(), x.GetMessage())
					}
				}
			}
			return waiting
		}
		time.Sleep(20 * time.Millisecond) // polling the clients' history, bounded by the deadline
	}
}

// TestCounterModel: the checker TestChaos relies on accepts a counter's
// histories and rejects forks and rollbacks.
func TestCounterModel(t *testing.T) {
	op := func(call, ret int64, n int) porcupine.Operation {
		return porcupine.Operation{Input: chaosInput{}, Call: call, Output: n, Return: ret}
	}
	loss := func(call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: chaosInput{crash: true}, Call: call, Return: ret}
	}
	for _, c := range []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"in order", []porcupine.Operation{op(0, 1, 1), op(2, 3, 2), op(4, 5, 3)}, true},
		{"a failed request's gap", []porcupine.Operation{op(0, 1, 1), op(2, 3, 3)}, true},
		{"concurrent answers completing out of order", []porcupine.Operation{op(0, 5, 2), op(1, 3, 1)}, true},
		{"acknowledged count rolled back", []porcupine.Operation{op(0, 1, 5), op(2, 3, 4)}, false},
		{"count answered twice", []porcupine.Operation{op(0, 1, 5), op(2, 3, 5)}, false},
		{"count answered twice at once", []porcupine.Operation{op(0, 5, 5), op(1, 3, 5)}, false},
		{"restart from a snapshot while a node may be lost", []porcupine.Operation{op(0, 1, 5), loss(1, 4), op(2, 3, 2), op(5, 6, 3)}, true},
		{"two copies answering in turn across a node loss", []porcupine.Operation{op(0, 1, 5), loss(1, 2), op(3, 4, 2), op(5, 6, 6), op(7, 8, 3)}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(counterModel, c.ops); got != c.ok {
				t.Fatalf("linearizable = %v, want %v", got, c.ok)
			}
		})
	}
}

// TestClocksNeedNotAgree: replica 0's wall clock runs an hour ahead of
// PostgreSQL's and replica 1's an hour behind; node-a's is two hours
// behind, and node-b's jumps from half an hour behind to three hours
// ahead mid-run (internal/clock's test offset: Linux time namespaces do
// not move the wall clock). Calm, requests to every actor are answered
// in order, every count one more than the last: no node is lost, no
// actor crashed or checkpointed for idleness. Then kill -9s and SIGSTOPs
// of nodes and replicas and partial partitions, whose recovery compares
// what hellos, records and snapshot ids say: the history checker finds
// no fork, rollback outside a node's loss, or failed request.
func TestClocksNeedNotAgree(t *testing.T) {
	jump := filepath.Join(t.TempDir(), "node-b-offset")
	if err := os.WriteFile(jump, []byte("-30m"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startChaosWith(t, map[string][]string{
		"apiserver-0": {"ATE_TEST_CLOCK_OFFSET=1h"},
		"apiserver-1": {"ATE_TEST_CLOCK_OFFSET=-1h"},
		"node-a":      {"ATE_TEST_CLOCK_OFFSET=-2h"},
		"node-b":      {"ATE_TEST_CLOCK_OFFSET_FILE=" + jump},
	})
	last := map[string]int{}
	for i := range 400 {
		if i == 200 {
			if err := os.WriteFile(jump, []byte("3h"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		a := r.actors[i%len(r.actors)]
		n, err := r.in.count("default/" + a)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if last[a] != 0 && n != last[a]+1 {
			t.Fatalf("%s answered count=%d after count=%d with clocks hours apart: restarted or run twice", a, n, last[a])
		}
		last[a] = n
	}
	for i, api := range r.apis {
		if n := api.records("node lost"); n != 0 {
			t.Errorf("replica %d declared a node lost %d times with no fault, clocks hours apart", i, n)
		}
	}
	for _, a := range r.actors {
		if x := r.in.actor(a); x.GetState() != atev1.ActorState_RUNNING {
			t.Errorf("%s is %s (%s) with no fault, clocks hours apart", a, x.GetState(), x.GetMessage())
		}
	}
	if t.Failed() {
		return
	}
	r.runFaults(1, 45*time.Second, "kill -9 node,kill -9 replica,SIGSTOP node,SIGSTOP replica,partial partition node–replica").check(t)
}

// TestDrainIsObeyedByEveryReplica: DrainNode through replica 0 only.
// Replica 1 places nothing on the node afterwards, also after replica 0
// is killed and the node itself restarts as a new process (which no
// longer remembers the drain): the drain is a record in the store that
// every replica reads, not a flag in the asked replica's memory or the
// node's.
func TestDrainIsObeyedByEveryReplica(t *testing.T) {
	r := startChaos(t)
	ctx := context.Background()
	replica0, replica1 := r.replica[0], r.replica[1]
	phaseOn := func(c atev1.ControlClient, name string) atev1.Node_Phase {
		t.Helper()
		nodes, err := c.ListNodes(ctx, &atev1.ListNodesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.GetNodes() {
			if n.GetName() == name {
				return n.GetPhase()
			}
		}
		return atev1.Node_PHASE_UNSPECIFIED
	}
	// Through replica 0 alone.
	if _, err := replica0.DrainNode(ctx, &atev1.DrainNodeRequest{Name: "node-a", Reason: "maintenance"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replica 1 to see node-a draining", 30*time.Second, func() bool { return phaseOn(replica1, "node-a") == atev1.Node_DRAINING })
	r.apis[0].kill()
	r.cluster.nodes["node-a"].kill()
	r.cluster.nodes["node-a"].start("ate node ready")
	if p := phaseOn(replica1, "node-a"); p != atev1.Node_DRAINING {
		t.Fatalf("node-a, drained through replica 0 (now dead), restarted and welcomed by replica 1 as %s, want DRAINING", p)
	}
	// Every actor put away and woken through replica 1, a few times:
	// none lands on node-a.
	for range 3 {
		for _, a := range r.actors {
			if _, err := replica1.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: a}); err != nil {
				t.Fatalf("suspend %s: %v", a, err)
			}
			if _, err := r.in.count("default/" + a); err != nil {
				t.Fatal(err)
			}
			if n := r.nodeOf(a); n != "node-b" {
				t.Fatalf("%s resumed on %q after node-a was drained, want node-b", a, n)
			}
		}
	}
}
