package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/apidial"
	"substrate.dev/ate/internal/ateconfig"
	"substrate.dev/ate/internal/latency"
	"substrate.dev/ate/internal/snapshot/s3/s3test"
	"substrate.dev/ate/internal/store/postgres"
	"substrate.dev/ate/internal/store/postgres/pgtest"
)

// sharedPG is the test binary's one PostgreSQL server, started on first
// use (pgtest) and stopped by TestMain (stopPostgres).
var sharedPG struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

func sharedPostgres(t testing.TB) *pgtest.Server {
	t.Helper()
	sharedPG.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sharedPG.srv, sharedPG.err = pgtest.Start(ctx)
	})
	if sharedPG.err != nil {
		t.Fatalf("PostgreSQL for the HA tests: %v", sharedPG.err)
	}
	return sharedPG.srv
}

func stopPostgres() {
	if sharedPG.srv != nil {
		_ = sharedPG.srv.Stop()
	}
}

// haCluster is two `ate apiserver` replicas over one PostgreSQL database,
// one node and one router that know both, over a real S3 server.
type haCluster struct {
	*cluster
	pg    *pgtest.Server
	apis  [2]*component
	addrs [2]string
	// replica[i] talks to apis[i] alone; c.in.client balances over both.
	replica [2]atev1.ControlClient
}

// haTiming: quick node loss (cluster timing) and 3 s actor leases, so a
// takeover after a replica dies waits 3 s.
var haTiming = append([]string{"--lease-duration", "3s"}, clusterTiming...)

func startHA(t *testing.T, workers int) *haCluster {
	t.Helper()
	h := &haCluster{cluster: &cluster{t: t, s3: s3test.New(t), nodes: map[string]*component{}, dir: t.TempDir()}, pg: sharedPostgres(t)}
	t.Setenv("AWS_ACCESS_KEY_ID", h.s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", h.s3.SecretKey)
	h.snaps = h.s3.URL("e2e")
	db := h.pg.NewDatabase(t)
	h.addrs = [2]string{freeAddr(t), freeAddr(t)}
	// Both at once: their migrations race for the advisory lock.
	for i := range h.apis {
		h.apis[i] = launchComponent(t, fmt.Sprintf("apiserver-%d", i), "ate apiserver ready", append([]string{"apiserver",
			"--data-dir", filepath.Join(h.dir, fmt.Sprintf("api%d", i)), "--listen", h.addrs[i], "--store", db,
			"--snapshots", h.snaps, "--log-level", "debug"}, haTiming...)...)
	}
	for _, api := range h.apis {
		api.waitReady()
	}
	wantSchema(t, db)
	h.api = h.apis[0]
	both := h.addrs[0] + "," + h.addrs[1]
	h.startNode("node-a", both, "--workers", fmt.Sprint(workers))
	var fields map[string]any
	h.router, fields = startComponent(t, "router", "ate router ready", "router", "--api", both,
		"--listen", freeAddr(t), "--drain-delay", "0s", "--log-level", "debug")
	h.in, h.replica = dialReplicas(t, h.dir, h.addrs, fields["router"].(string))
	return h
}

// dialReplicas is the installation-shaped view of two API server
// replicas at addrs and a router at routerAddr (a client config under
// dir/cli, a Control client balancing over both), and a Control client
// of each replica alone.
func dialReplicas(t testing.TB, dir string, addrs [2]string, routerAddr string) (*installation, [2]atev1.ControlClient) {
	t.Helper()
	both := addrs[0] + "," + addrs[1]
	var replica [2]atev1.ControlClient
	in := &installation{t: t, dataDir: filepath.Join(dir, "cli"), apiAddr: both, routerAddr: routerAddr}
	if err := ateconfig.Write(filepath.Join(in.dataDir, "config.yaml"), clusterClientConfig(both)); err != nil {
		t.Fatal(err)
	}
	conn, err := apidial.Dial(both, dialOptions(t, clusterClientConfig(both))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	in.client = atev1.NewControlClient(conn)
	for i, a := range addrs {
		c, err := apidial.Dial(a, dialOptions(t, clusterClientConfig(a))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		replica[i] = atev1.NewControlClient(c)
	}
	return in, replica
}

// wantSchema checks that the database two replicas migrated at once is
// at the newest migration, each applied exactly once.
func wantSchema(t *testing.T, db string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var newest, rows, distinct int64
	err = conn.QueryRow(ctx, `SELECT coalesce(max(version_id), 0), count(*), count(DISTINCT version_id)
		FROM goose_db_version WHERE is_applied AND version_id > 0`).Scan(&newest, &rows, &distinct)
	if err != nil {
		t.Fatal(err)
	}
	if newest != postgres.SchemaVersion() || rows != distinct {
		t.Fatalf("schema after two replicas migrated at once: version %d (want %d), %d migrations applied for %d versions",
			newest, postgres.SchemaVersion(), rows, distinct)
	}
}

// slowTemplate is the counter whose wakeup probe fails for 4 s after a
// restore: a resume stays RESUMING, its worker claimed and the node
// restoring, long enough to kill or stop the replica running it.
func (h *haCluster) slowTemplate() {
	h.in.counterTemplate("slow", map[string]string{"WARMUP_MS": "4000", "RESTORE_GAP_MS": "300"},
		"wakeupProbe:\n  httpGet: {path: /ready, port: 8080}\n")
}

// suspendedActor creates an actor of the slow template that has counted
// to 1 and is SUSPENDED.
func (h *haCluster) suspendedActor(name string) {
	h.t.Helper()
	h.in.ate("create", "actor", name, "--template", "slow")
	h.in.mustCount("default/"+name, 1)
	h.in.ate("suspend", "actor", name)
}

// resumeOn starts ResumeActor of name on replica i; the channel gets its
// outcome.
func (h *haCluster) resumeOn(i int, name string) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		_, err := h.replica[i].ResumeActor(ctx, &atev1.ResumeActorRequest{Atespace: "default", Name: name})
		done <- err
	}()
	return done
}

// getOn reads the actor through replica i.
func (h *haCluster) getOn(i int, name string) *atev1.Actor {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := h.replica[i].GetActor(ctx, &atev1.GetActorRequest{Atespace: "default", Name: name})
	if err != nil {
		h.t.Fatalf("GetActor %s on replica %d: %v", name, i, err)
	}
	return a
}

// holders returns, by worker, the actor holding it (free workers absent).
func (h *haCluster) holders() map[string]string {
	h.t.Helper()
	resp, err := h.in.client.ListWorkers(context.Background(), &atev1.ListWorkersRequest{})
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]string{}
	for _, w := range resp.GetWorkers() {
		if w.GetActor() != "" {
			out[w.GetName()] = w.GetActor()
		}
	}
	return out
}

// wantOnlyHolder checks that name's worker is held by name and that no
// other worker is held by it.
func (h *haCluster) wantOnlyHolder(name string, a *atev1.Actor) {
	h.t.Helper()
	held := 0
	for w, holder := range h.holders() {
		if strings.HasSuffix(holder, "/"+name) || holder == name {
			held++
			if w != a.GetWorker() {
				h.t.Fatalf("actor %s holds worker %s but its record names %s", name, w, a.GetWorker())
			}
		}
	}
	if held != 1 {
		h.t.Fatalf("actor %s holds %d workers, want 1 (%v)", name, held, h.holders())
	}
}

// TestHAReplicaKilledMidResume: resumes spread across two API server
// replicas; one is killed (SIGKILL) after it claimed a worker for a resume
// and while the node restores the actor. The retry through the other
// replica takes the actor over once the dead one's lease lapses: it ends
// RUNNING with its memory, on one worker, and the worker claimed by the
// dead replica is not leaked.
func TestHAReplicaKilledMidResume(t *testing.T) {
	h := startHA(t, 2)
	h.slowTemplate()
	ctx := context.Background()
	for i := range 4 {
		name := fmt.Sprintf("spread-%d", i)
		h.in.ate("create", "actor", name, "--template", "slow")
		if _, err := h.in.client.ResumeActor(ctx, &atev1.ResumeActorRequest{Atespace: "default", Name: name}); err != nil {
			t.Fatalf("resume %s: %v", name, err)
		}
		if _, err := h.in.client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: name}); err != nil {
			t.Fatalf("suspend %s: %v", name, err)
		}
	}
	for i, api := range h.apis {
		if api.records("actor state") == 0 {
			t.Fatalf("replica %d ran no workflow of 8 balanced over both; log:\n%s", i, api.logText())
		}
	}

	h.suspendedActor("victim")
	first := h.resumeOn(0, "victim")
	waitFor(t, "the resume on replica 0 to claim a worker", 30*time.Second, func() bool {
		a := h.getOn(1, "victim")
		return a.GetState() == atev1.ActorState_RESUMING && a.GetWorker() != ""
	})
	h.apis[0].kill()
	if err := <-first; err == nil {
		t.Fatal("the resume on the killed replica answered OK")
	}
	// The retry, through the balancing connection as a router or the CLI
	// makes it: the dead replica is skipped, the live one takes over.
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	a, err := h.in.client.ResumeActor(rctx, &atev1.ResumeActorRequest{Atespace: "default", Name: "victim"})
	if err != nil {
		t.Fatalf("retried resume through the surviving replica: %v", err)
	}
	if a.GetState() != atev1.ActorState_RUNNING {
		t.Fatalf("after the retry: %s (%s)", a.GetState(), a.GetMessage())
	}
	h.wantOnlyHolder("victim", a)
	h.in.mustCount("default/victim", 2)
	if _, err := h.in.client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: "victim"}); err != nil {
		t.Fatal(err)
	}
	if held := h.holders(); len(held) != 0 {
		t.Fatalf("workers still held with every actor suspended (the dead replica's claim leaked?): %v", held)
	}
}

// TestHAStalledReplicaIsFenced: a replica stopped (SIGSTOP) mid-resume
// loses the actor to the other replica once its heartbeat lapses; when it continues,
// its late writes are refused by the lease's fencing token, and the
// actor's record keeps the other replica's result. Meanwhile traffic
// through the router is served: its reads sent to the stopped replica
// are hedged onto the other (apidial), and a resume sent there before
// that was found out fails over once the connection's keepalive times
// out.
func TestHAStalledReplicaIsFenced(t *testing.T) {
	h := startHA(t, 3)
	h.slowTemplate()
	h.suspendedActor("stalled")
	others := []string{"other-1", "other-2"}
	for _, name := range others {
		h.suspendedActor(name)
	}
	first := h.resumeOn(0, "stalled")
	waitFor(t, "the resume on replica 0 to claim a worker", 30*time.Second, func() bool {
		a := h.getOn(1, "stalled")
		return a.GetState() == atev1.ActorState_RESUMING && a.GetWorker() != ""
	})
	claimedByStalled := h.getOn(1, "stalled").GetWorker()
	if err := h.apis[0].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = h.apis[0].cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	// The router balances over both replicas, so of two resumes one is
	// sent to the stopped one.
	for _, name := range others {
		h.in.mustCount("default/"+name, 2)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := h.replica[1].SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: name})
		cancel()
		if err != nil {
			t.Fatalf("suspend %s on replica 1: %v", name, err)
		}
	}
	// Replica 1 takes the actor's lease over once replica 0's heartbeat
	// has lapsed (its lease has 10 s), rolls the interrupted resume back
	// and resumes the actor itself.
	took := time.Now()
	if err := <-h.resumeOn(1, "stalled"); err != nil {
		t.Fatalf("resume on replica 1 while replica 0 is stopped: %v", err)
	}
	t.Logf("replica 1 took the actor over and resumed it in %v", time.Since(took).Round(time.Millisecond))
	won := h.getOn(1, "stalled")
	if won.GetState() != atev1.ActorState_RUNNING {
		t.Fatalf("after replica 1's resume: %s", won.GetState())
	}
	if err := h.apis[0].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	// The stopped replica's workflow goes on where it stood, and its
	// writes are refused by the fence.
	waitFor(t, "the woken replica's late write to be fenced", time.Minute, func() bool {
		// store.ErrFenced's words, in the refusal of the stalled
		// replica's write or of its lease renewal.
		return strings.Contains(h.apis[0].logText(), "expired or was taken over")
	})
	err := <-first
	if err == nil {
		t.Fatalf("the stalled replica's resume succeeded after it lost the actor's lease (worker %s, winner's %s)", claimedByStalled, won.GetWorker())
	}
	t.Logf("stalled replica's resume: %v", err)
	// Whatever the stalled replica tried after waking, the record is the
	// winner's, and stays so.
	h.in.mustCount("default/stalled", 2)
	after := h.getOn(0, "stalled")
	if after.GetState() != atev1.ActorState_RUNNING || after.GetWorker() != won.GetWorker() || after.GetResumes() != won.GetResumes() {
		t.Fatalf("record after the stalled replica woke: state %s worker %s resumes %d; want the winner's RUNNING on %s with %d resumes",
			after.GetState(), after.GetWorker(), after.GetResumes(), won.GetWorker(), won.GetResumes())
	}
	h.wantOnlyHolder("stalled", after)
	if code := status.Code(err); code != codes.Aborted && code != codes.Unavailable {
		t.Fatalf("stalled replica's resume = %v; want ABORTED (its lease was taken over) or UNAVAILABLE", err)
	}
}

// TestHAPostgresRestartUnderLoad: PostgreSQL restarts (pg_ctl restart -m
// fast) during 20 s of wake-ups through the router and suspends through
// the API, over two replicas. Every request is answered, or refused with
// a status a client retries (HTTP 503 with Retry-After; gRPC UNAVAILABLE
// or ABORTED); no actor loses its memory (each one's count only grows)
// or is left wedged: afterwards every one serves and suspends, and no
// worker stays claimed.
func TestHAPostgresRestartUnderLoad(t *testing.T) {
	h := startHA(t, 3)
	h.in.counterTemplate("fast", nil, "")
	const actors = 3
	for i := range actors {
		h.in.ate("create", "actor", fmt.Sprintf("load-%d", i), "--template", "fast")
	}
	ctx := context.Background()
	var (
		mu       sync.Mutex
		problems []string
		served   [actors]int
		afterPG  int // wake-ups answered 200 after the restart
	)
	restarted := make(chan struct{})
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	deadline := time.Now().Add(20 * time.Second)
	var wg sync.WaitGroup
	for i := range actors {
		wg.Go(func() {
			name := fmt.Sprintf("load-%d", i)
			last := 0
			for time.Now().Before(deadline) {
				code, body, hdr, err := h.in.request("GET", "default/"+name, "/", "")
				switch {
				case err != nil:
					fail("GET %s: %v", name, err)
					return
				case code == http.StatusOK:
					var n int
					if _, err := fmt.Sscanf(strings.TrimSpace(body), "count=%d", &n); err != nil || n <= last {
						fail("GET %s = %q after count=%d: memory lost or replayed", name, body, last)
						return
					}
					last = n
					mu.Lock()
					served[i]++
					select {
					case <-restarted:
						afterPG++
					default:
					}
					mu.Unlock()
				case code == http.StatusServiceUnavailable && hdr.Get("Retry-After") != "":
					continue
				default:
					fail("GET %s = %d %q: not a retryable refusal", name, code, body)
					return
				}
				_, err = h.in.client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: name})
				if c := status.Code(err); err != nil && c != codes.Unavailable && c != codes.Aborted {
					fail("suspend %s: %v (code %s): not retryable", name, err, c)
					return
				}
			}
		})
	}
	// The restart comes once the load is under way: 20 wake-ups served.
	go func() {
		defer close(restarted)
		for {
			mu.Lock()
			n := served[0] + served[1] + served[2]
			mu.Unlock()
			if n >= 20 {
				break
			}
			if time.Now().After(deadline) {
				fail("only %d wake-ups served before the load ended: PostgreSQL never restarted under load", n)
				return
			}
			time.Sleep(10 * time.Millisecond) // polling the count, bounded by the load's deadline
		}
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := h.pg.Restart(rctx); err != nil {
			fail("restart PostgreSQL: %v", err)
		}
	}()
	wg.Wait()
	<-restarted
	if len(problems) > 0 {
		t.Fatalf("%d problems under a PostgreSQL restart:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	t.Logf("wake-ups served per actor: %v; %d after the restart", served, afterPG)
	if afterPG == 0 {
		t.Fatal("no wake-up was served after PostgreSQL came back")
	}
	for i := range actors {
		name := fmt.Sprintf("load-%d", i)
		waitFor(t, name+" serving after the restart", time.Minute, func() bool {
			code, _ := h.in.get("default/"+name, "/")
			return code == http.StatusOK
		})
		waitFor(t, name+" suspended", time.Minute, func() bool {
			a, err := h.in.client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: name})
			return err == nil && a.GetState() == atev1.ActorState_SUSPENDED
		})
	}
	if held := h.holders(); len(held) != 0 {
		t.Fatalf("workers still claimed with every actor suspended: %v", held)
	}
}

// TestHAAPIServerWaitsForPostgres: an API server started before its
// database is reachable retries with backoff and says so, keeps /readyz
// at 503 meanwhile, and serves once the database answers.
func TestHAAPIServerWaitsForPostgres(t *testing.T) {
	pg := sharedPostgres(t)
	db := pg.NewDatabase(t)
	// The database as seen through a port nothing listens on yet.
	lateAddr := freeAddr(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = lateAddr
	mgmt := freeAddr(t)
	api, _ := startComponent(t, "apiserver", "record store unreachable; retrying", "apiserver",
		"--data-dir", t.TempDir(), "--listen", freeAddr(t), "--store", u.String(), "--management-addr", mgmt, "--log-level", "debug")
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + mgmt + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, "/readyz to answer", 10*time.Second, func() bool { code, _ := readyz(); return code != 0 })
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "record store") {
		t.Fatalf("/readyz before the database is reachable = %d %q, want 503 naming the record store", code, body)
	}
	if !strings.Contains(api.logText(), lateAddr) {
		t.Fatalf("the retry log should name the address tried; log:\n%s", api.logText())
	}
	// Now the database answers on that port.
	forward(t, lateAddr, pg.Addr())
	waitFor(t, "the API server ready once the database answers", time.Minute, func() bool {
		return api.records("ate apiserver ready") == 1
	})
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz once connected = %d %q", code, body)
	}
}

// forward accepts on from and copies each connection to and from to,
// until the test ends.
func forward(t *testing.T, from, to string) {
	t.Helper()
	ln, err := net.Listen("tcp", from)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", to)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in) }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
}

// TestHARollingRestart: the replicas restart one after another (SIGTERM,
// start again) under traffic through the router. A restarting replica
// must not take the node for lost or its actors for crashed while the
// other replica runs them: every answer counts on from the last (nothing
// answered is rolled back or repeated), and every refusal is a 503 with
// Retry-After.
func TestHARollingRestart(t *testing.T) {
	h := startHA(t, 2)
	h.in.counterTemplate("fast", nil, "")
	const actors = 3
	for i := range actors {
		h.in.ate("create", "actor", fmt.Sprintf("roll-%d", i), "--template", "fast")
	}
	var (
		mu       sync.Mutex
		problems []string
		served   int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range actors {
		wg.Go(func() {
			name := fmt.Sprintf("default/roll-%d", i)
			last := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, body, hdr, err := h.in.request("GET", name, "/", "")
				mu.Lock()
				switch {
				case err != nil:
					problems = append(problems, fmt.Sprintf("GET %s: %v", name, err))
				case code == http.StatusOK:
					var n int
					if _, err := fmt.Sscanf(strings.TrimSpace(body), "count=%d", &n); err != nil || n != last+1 {
						problems = append(problems, fmt.Sprintf("GET %s = %q after count=%d", name, body, last))
					}
					last = n
					served++
				case code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "":
					problems = append(problems, fmt.Sprintf("GET %s = %d %q", name, code, body))
				}
				mu.Unlock()
			}
		})
	}
	answers := func() int {
		mu.Lock()
		defer mu.Unlock()
		return served
	}
	for _, i := range []int{0, 1, 0} {
		registered := h.apis[i].records("node registered")
		if err := h.apis[i].stop(30 * time.Second); err != nil {
			t.Errorf("replica %d after SIGTERM: %v", i, err)
		}
		h.apis[i].start("ate apiserver ready")
		waitFor(t, fmt.Sprintf("the node registered with restarted replica %d", i), 30*time.Second, func() bool {
			return h.apis[i].records("node registered") > registered
		})
		// Then traffic through both for a while: past a loss deadline
		// (2 s here) of the restarted replica's view of the node.
		before := answers()
		waitFor(t, "30 more answers", time.Minute, func() bool { return answers() >= before+30 })
	}
	close(stop)
	wg.Wait()
	if len(problems) > 0 {
		t.Fatalf("%d problems while the replicas restarted in turn (%d answers):\n%s", len(problems), served, strings.Join(problems, "\n"))
	}
	t.Logf("%d answers, none rolled back", served)
	for _, api := range h.apis {
		if n := api.records("node lost"); n != 0 {
			t.Fatalf("a replica declared the live node lost %d times; log:\n%s", n, api.logText())
		}
	}
}

// TestHAReplicaStandsStillUnderLoad: one of two replicas is stopped
// (SIGSTOP) for 15 s while clients read through the API (hedged reads,
// apidial), send requests to a counter actor through the router, and
// suspend a second counter and wake it with a request, in turns (state
// changes: watched, moved off a silent replica, and the actor's lease
// taken over once its heartbeat lapsed). No call fails and every count is
// one more than the last; the latencies before and during the stop are
// logged (BENCHMARKS.md): without hedging, a read sent to the stopped
// replica waited for keepalive's 15 s, and a wake-up whose lease it held
// waited for that lease (10 s).
func TestHAReplicaStandsStillUnderLoad(t *testing.T) {
	h := startHA(t, 2)
	h.counterActor() // count=1
	h.in.ate("create", "actor", "counter-2", "--template", "counter")
	h.in.mustCount("default/counter-2", 1)
	type sample struct {
		took   time.Duration
		during bool
	}
	var (
		mu               sync.Mutex
		reads, requests  []sample
		wakes            []sample
		lastWake         = 1
		failures         []string
		stopping         sync.WaitGroup
		done             = make(chan struct{})
		during           atomic.Bool
		lastCount        = 1
		countsOutOfOrder []int
	)
	record := func(into *[]sample, took time.Duration, wasDuring bool, failure string) {
		mu.Lock()
		defer mu.Unlock()
		if failure != "" {
			failures = append(failures, failure)
			return
		}
		*into = append(*into, sample{took, wasDuring})
	}
	for range 4 {
		repeat(&stopping, done, func() {
			start, wasDuring := time.Now(), during.Load()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := h.in.client.GetActor(ctx, &atev1.GetActorRequest{Atespace: "default", Name: "counter-1"})
			cancel()
			failure := ""
			if err != nil {
				failure = fmt.Sprintf("GetActor: %v after %s", err, time.Since(start))
			}
			record(&reads, time.Since(start), wasDuring, failure)
		})
	}
	// countNext asks actor for its count, which must be one more than
	// *last; it returns the failure, if any.
	countNext := func(actor string, last *int, start time.Time) string {
		n, err := h.in.count(actor)
		if err != nil {
			return fmt.Sprintf("request to %s: %v after %s", actor, err, time.Since(start))
		}
		mu.Lock()
		defer mu.Unlock()
		if n != *last+1 {
			countsOutOfOrder = append(countsOutOfOrder, n)
		}
		*last = n
		return ""
	}
	repeat(&stopping, done, func() {
		start, wasDuring := time.Now(), during.Load()
		failure := countNext("default/counter-1", &lastCount, start)
		record(&requests, time.Since(start), wasDuring, failure)
	})
	repeat(&stopping, done, func() {
		start, wasDuring := time.Now(), during.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := h.in.client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: "counter-2"})
		cancel()
		failure := ""
		if err != nil {
			failure = fmt.Sprintf("SuspendActor: %v after %s", err, time.Since(start))
		} else {
			failure = countNext("default/counter-2", &lastWake, start)
		}
		record(&wakes, time.Since(start), wasDuring, failure)
	})
	var finished sync.Once
	finish := func() { finished.Do(func() { close(done); stopping.Wait() }) }
	defer finish()
	// enough waits for 100 more reads and requests than now.
	enough := func() func() bool {
		mu.Lock()
		r, q := len(reads)+100, len(requests)+100
		mu.Unlock()
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(reads) >= r && len(requests) >= q || len(failures) > 0
		}
	}
	waitFor(t, "load before the stop", 30*time.Second, enough())
	if err := h.apis[1].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.apis[1].cmd.Process.Signal(syscall.SIGCONT) }()
	during.Store(true)
	// The fault's length, as in the scenario (15 s, keepalive's whole
	// timeout): not a wait for anything.
	<-time.After(15 * time.Second)
	if err := h.apis[1].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Error(err)
	}
	during.Store(false)
	waitFor(t, "load after the stop", 30*time.Second, enough())
	finish()
	if len(failures) > 0 {
		t.Fatalf("%d calls failed while replica 1 stood still, first: %s", len(failures), failures[0])
	}
	if len(countsOutOfOrder) > 0 {
		t.Fatalf("counts out of order: %v", countsOutOfOrder)
	}
	for _, s := range []struct {
		name    string
		samples []sample
	}{{"reads (GetActor)", reads}, {"router requests", requests}, {"suspend + wake-up cycles", wakes}} {
		var before, stopped []time.Duration
		for _, x := range s.samples {
			if x.during {
				stopped = append(stopped, x.took)
			} else {
				before = append(before, x.took)
			}
		}
		t.Logf("%s: outside the stop %d, p50 %.1f ms, p99 %.1f ms; during it %d, p50 %.1f ms, p99 %.1f ms, max %.1f ms", s.name,
			len(before), latency.Ms(latency.Quantile(before, 0.5)), latency.Ms(latency.Quantile(before, 0.99)),
			len(stopped), latency.Ms(latency.Quantile(stopped, 0.5)), latency.Ms(latency.Quantile(stopped, 0.99)), latency.Ms(latency.Quantile(stopped, 1)))
	}
}
