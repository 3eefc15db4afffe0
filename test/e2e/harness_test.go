// Package e2e runs Substrate as a user does: the real `ate` binary (`ate
// up` with real runsc sandboxes, the real router, the CLI) and plain HTTP.
// It needs root, runsc (hack/install-runsc.sh) and the example images
// (hack/build-examples.sh); `make test` provides all three. A missing
// dependency fails the run, it never skips.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/ateconfig"
	"substrate.dev/ate/internal/sandbox/gvisor"
)

var (
	ateBin  string
	repoDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	_, file, _, _ := runtime.Caller(0)
	repoDir = filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	var problems []string
	if os.Geteuid() != 0 {
		problems = append(problems, "e2e tests must run as root (network namespaces, runsc)")
	}
	if _, err := os.Stat(gvisor.DefaultRunscPath()); err != nil {
		problems = append(problems, "runsc missing: run `bash hack/install-runsc.sh` (or `make test`)")
	}
	for _, img := range []string{"counter", "python-notes", "node-sessions"} {
		if _, err := os.Stat(filepath.Join(repoDir, "build/images", img, "index.json")); err != nil {
			problems = append(problems, "example image build/images/"+img+" missing: run `bash hack/build-examples.sh` (or `make test`)")
		}
	}
	if len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: missing dependencies:\n  "+strings.Join(problems, "\n  "))
		return 1
	}
	dir, err := os.MkdirTemp("", "ate-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ateBin = filepath.Join(dir, "ate")
	// atetestclock: ATE_TEST_CLOCK_OFFSET moves a component's wall clock
	// (internal/clock; the clock tests); inert without it.
	build := exec.Command("go", "build", "-tags", "atetestclock", "-o", ateBin, "./cmd/ate")
	build.Dir, build.Stdout, build.Stderr = repoDir, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build ate:", err)
		return 1
	}
	if err := writeTokenFile(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: token file:", err)
		return 1
	}
	caDir = filepath.Join(dir, "ca")
	if out, err := initCA(caDir); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: ate certs init: %v\n%s", err, out)
		return 1
	}
	// The HA tests' PostgreSQL server, if one started, stops with the
	// binary: nothing is left running.
	defer stopPostgres()
	return m.Run()
}

// installation is one running `ate up` with its own data dir, ports and
// worker namespaces.
type installation struct {
	t          testing.TB
	dataDir    string
	routerAddr string
	apiAddr    string
	// metricsAddr is the management listener's (/metrics).
	metricsAddr string
	// dashboardURL is the web dashboard's ("http://127.0.0.1:port/").
	dashboardURL string
	client       atev1.ControlClient

	cmd *exec.Cmd // nil once `ate up` was killed or terminated
	// workerPrefix names its runsc root, /run/ate/<workerPrefix>.
	workerPrefix string

	mu  sync.Mutex
	log strings.Builder
	// standbys counts "standby prepared" records (the node prepared a
	// container on a free worker; internal/node/standby.go).
	standbys int
}

// startUp runs `ate up` with the given workers and extra flags and waits
// until it serves (and, with --demo, until the demo actor exists and its
// template "counter" is READY).
func startUp(t testing.TB, workers int, extra ...string) *installation {
	t.Helper()
	return startUpIn(t, t.TempDir(), workers, extra...)
}

// startUpIn is startUp on a given data dir, e.g. to restart an
// installation on the same state.
func startUpIn(t testing.TB, dataDir string, workers int, extra ...string) *installation {
	t.Helper()
	return startUpWait(t, dataDir, workers, 60*time.Second, extra...)
}

// startUpWait is startUpIn waiting up to ready for `ate up` to serve:
// setting up hundreds of workers takes longer than a minute.
func startUpWait(t testing.TB, dataDir string, workers int, ready time.Duration, extra ...string) *installation {
	t.Helper()
	in := &installation{t: t, dataDir: dataDir}
	args := append([]string{"up", "--data-dir", in.dataDir, "--workers", fmt.Sprint(workers),
		"--api-addr", "127.0.0.1:0", "--router-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-level", "debug",
		"--demo-template", filepath.Join(repoDir, "test/e2e/testdata/counter.yaml"),
		// Nothing balances load in front of a test's router; tests of the
		// drain set their own delay (flags given later win).
		"--drain-delay", "0s"}, extra...)
	cmd := exec.Command(ateBin, args...)
	cmd.Dir = repoDir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = logWriter{in}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	in.cmd = cmd
	readyC := make(chan map[string]any, 1)
	demo := slices.Contains(extra, "--demo")
	go in.readLog(stderr, readyC, demo)
	t.Cleanup(func() {
		// SIGTERM is what an operator sends; ate up must exit 0 after
		// suspending its actors.
		if !in.killed() {
			if err := in.terminate(90 * time.Second); err != nil {
				t.Errorf("ate up after SIGTERM: %v", err)
			} else {
				in.checkRootRemoved()
			}
		}
		if t.Failed() {
			t.Logf("ate up log:\n%s", in.logText())
		}
	})
	select {
	case info := <-readyC:
		in.apiAddr, in.routerAddr = info["api"].(string), info["router"].(string)
		in.workerPrefix, _ = info["workerPrefix"].(string)
		in.metricsAddr, _ = info["metrics"].(string)
		in.dashboardURL, _ = info["dashboard"].(string)
	case <-time.After(ready):
		t.Fatalf("ate up did not become ready within %s; log:\n%s", ready, in.logText())
	}
	// As the CLI does: the client config ate up wrote (its admin token).
	conn, err := in.dialAPI()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	in.client = atev1.NewControlClient(conn)
	if demo {
		in.waitTemplateReady("counter")
	}
	return in
}

// logWriter keeps `ate up`'s stdout (the demo banner, a fatal error) in
// the installation's log next to its stderr.
type logWriter struct{ in *installation }

func (w logWriter) Write(p []byte) (int, error) {
	w.in.mu.Lock()
	defer w.in.mu.Unlock()
	return w.in.log.Write(p)
}

// kill ends `ate up` with SIGKILL, as a crash would, and waits for it.
func (in *installation) kill() {
	in.t.Helper()
	_ = in.cmd.Process.Kill()
	_ = in.cmd.Wait()
	in.mu.Lock()
	in.cmd = nil
	in.mu.Unlock()
}

// terminate sends SIGTERM to `ate up` and waits up to timeout for it to
// exit, returning how it exited; the harness's cleanup has nothing left
// to stop afterwards.
func (in *installation) terminate(timeout time.Duration) error {
	in.t.Helper()
	in.mu.Lock()
	cmd := in.cmd
	in.cmd = nil
	in.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("ate up did not exit within %s of SIGTERM", timeout)
	}
}

// checkRootRemoved fails the test if `ate up`, having exited cleanly,
// left its runsc root or the root's lock behind: the whole suite's
// leftover check would find it too, without naming the test.
func (in *installation) checkRootRemoved() {
	in.t.Helper()
	if in.workerPrefix == "" {
		return
	}
	root := filepath.Join("/run/ate", in.workerPrefix)
	for _, p := range []string{root, root + ".lock"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			entries, _ := os.ReadDir(p)
			names := make([]string, 0, len(entries))
			for _, e := range entries {
				names = append(names, e.Name())
			}
			in.t.Errorf("ate up exited cleanly but left %s behind (holding %q)", p, names)
		}
	}
}

func (in *installation) killed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cmd == nil
}

// readLog keeps the log and reports the "ate up ready" record (after the
// demo actor exists when demo is set).
func (in *installation) readLog(r io.Reader, ready chan<- map[string]any, demo bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var info map[string]any
	for sc.Scan() {
		line := sc.Text()
		in.mu.Lock()
		in.log.WriteString(line + "\n")
		in.mu.Unlock()
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch rec["msg"] {
		case "ate up ready":
			info = rec
			if !demo {
				ready <- info
			}
		case "demo actor ready":
			ready <- info
		case "standby prepared":
			in.mu.Lock()
			in.standbys++
			in.mu.Unlock()
		}
	}
}

// standbysPrepared returns how many standbys the node has prepared so far.
func (in *installation) standbysPrepared() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.standbys
}

// standbyAfter runs putAway, a suspend or pause that frees a worker, and
// waits until the node has prepared one more standby: benchmarks measure
// activation on a node that had time to get ready, as an actor idle for
// minutes finds it.
func (in *installation) standbyAfter(putAway func()) {
	in.t.Helper()
	want := in.standbysPrepared() + 1
	putAway()
	waitFor(in.t, fmt.Sprintf("the node to prepare standby %d", want), 30*time.Second,
		func() bool { return in.standbysPrepared() >= want })
}

func (in *installation) logText() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.log.String()
}

// logRecords returns `ate up`'s JSON log records with message msg, in
// order.
func (in *installation) logRecords(msg string) []map[string]any {
	var out []map[string]any
	for line := range strings.Lines(in.logText()) {
		if !strings.Contains(line, `"msg":"`+msg+`"`) {
			continue
		}
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// loggedActor is the name of the actor a log record is about: the name in
// its "actor" attribute, a names.ActorKey group {"name", "atespace"}.
func loggedActor(rec map[string]any) string {
	g, _ := rec["actor"].(map[string]any)
	name, _ := g["name"].(string)
	return name
}

// ate runs the CLI against this installation and returns its stdout; it
// fails the test if the command fails.
func (in *installation) ate(args ...string) string {
	in.t.Helper()
	out, err := in.ateErr(args...)
	if err != nil {
		in.t.Fatalf("ate %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// ateErr runs the CLI and returns its combined output and error.
func (in *installation) ateErr(args ...string) (string, error) {
	out, err := in.ateCommand(args...).CombinedOutput()
	return string(out), err
}

// ateCommand is the CLI with args against this installation, not started.
func (in *installation) ateCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(ateBin, args...)
	cmd.Dir = repoDir
	cmd.Env = append(os.Environ(), "ATE_CONFIG="+filepath.Join(in.dataDir, "config.yaml"))
	return cmd
}

// ateStarted starts the CLI with args in the background (a long `ate
// exec`), its stderr to stderr if not nil, and returns it once its first
// line of stdout came, with that line; the test's cleanup kills it.
func (in *installation) ateStarted(stderr io.Writer, args ...string) (*exec.Cmd, string) {
	in.t.Helper()
	cmd := in.ateCommand(args...)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		in.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		in.t.Fatal(err)
	}
	in.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		in.t.Fatalf("ate %s: no first line (%q): %v", strings.Join(args, " "), line, err)
	}
	return cmd, line
}

// get sends GET / for actor "<atespace>/<name>" through the router using
// the ate-target-actor header and returns status and body.
func (in *installation) get(actor, path string) (int, string) {
	in.t.Helper()
	return in.do(http.MethodGet, actor, path, "")
}

func (in *installation) do(method, actor, path, body string) (int, string) {
	in.t.Helper()
	code, b, _, err := in.request(method, actor, path, body)
	if err != nil {
		in.t.Fatalf("%s %s %s: %v", method, actor, path, err)
	}
	return code, b
}

var httpClient = &http.Client{Timeout: 90 * time.Second}

func (in *installation) request(method, actor, path, body string) (int, string, http.Header, error) {
	req, err := http.NewRequest(method, "http://"+in.routerAddr+path, strings.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Ate-Target-Actor", actor)
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

// mustCount GETs the counter actor and checks it answers count=want.
func (in *installation) mustCount(actor string, want int) {
	in.t.Helper()
	code, body := in.get(actor, "/")
	if code != http.StatusOK || strings.TrimSpace(body) != fmt.Sprintf("count=%d", want) {
		in.t.Fatalf("GET %s = %d %q, want 200 count=%d", actor, code, body, want)
	}
}

// count sends GET / to a counter actor through the router and returns
// the count it answered; the error says what came back otherwise.
func (in *installation) count(actor string) (int, error) {
	code, body, _, err := in.request(http.MethodGet, actor, "/", "")
	var n int
	if err == nil && code == http.StatusOK {
		if _, err = fmt.Sscanf(strings.TrimSpace(body), "count=%d", &n); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("GET %s answered %d %q (%v), want 200 count=N", actor, code, strings.TrimSpace(body), err)
}

// repeat runs f back to back on a goroutine of wg until done is closed.
func repeat(wg *sync.WaitGroup, done <-chan struct{}, f func()) {
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				f()
			}
		}
	})
}

// actor reads the actor's record through the API.
func (in *installation) actor(name string) *atev1.Actor {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := in.client.GetActor(ctx, &atev1.GetActorRequest{Atespace: "default", Name: name})
	if err != nil {
		in.t.Fatalf("GetActor %s: %v", name, err)
	}
	return a
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// localhostClient resolves every *.localhost name to 127.0.0.1, as
// browsers and systemd-resolved do (RFC 6761 §6.3).
func localhostClient() *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if host == "localhost" || strings.HasSuffix(host, ".localhost") {
			host = "127.0.0.1"
		}
		return d.DialContext(ctx, network, net.JoinHostPort(host, port))
	}}
	return &http.Client{Transport: tr, Timeout: 90 * time.Second}
}

// createTemplate creates a template from a YAML file under examples/ and
// waits until its golden snapshot is READY.
func (in *installation) createTemplate(file, name string) {
	in.t.Helper()
	in.ate("create", "template", "-f", filepath.Join(repoDir, file))
	in.waitTemplateReady(name)
}

func (in *installation) waitTemplateReady(name string) {
	in.t.Helper()
	waitFor(in.t, "template "+name+" READY", 3*time.Minute, func() bool {
		tpl, err := in.client.GetActorTemplate(context.Background(), &atev1.GetActorTemplateRequest{Atespace: "default", Name: name})
		if err != nil {
			in.t.Fatalf("GetActorTemplate: %v", err)
		}
		if tpl.GetStatus().GetPhase() == atev1.ActorTemplateStatus_FAILED {
			in.t.Fatalf("template %s golden build failed: %s", name, tpl.GetStatus().GetMessage())
		}
		return tpl.GetStatus().GetPhase() == atev1.ActorTemplateStatus_READY
	})
}

// dialAPI connects to the API server as the client config ate up wrote
// says (ateconfig.DialOptions: its token), with extra options after.
func (in *installation) dialAPI(extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	c, err := ateconfig.Load(filepath.Join(in.dataDir, "config.yaml"))
	if err != nil {
		return nil, err
	}
	opts, err := ateconfig.DialOptions(c)
	if err != nil {
		return nil, err
	}
	opts = append(opts, extra...)
	return grpc.NewClient(in.apiAddr, opts...)
}
