package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/k8s/k8stest"
	"substrate.dev/ate/internal/testlog"
)

// testEnv is the package's one control plane (TestMain): each test
// works in namespaces of its own.
var testEnv *k8stest.Env

func TestMain(m *testing.M) {
	// Once, before any controller logs (klog's logger is not safe to set
	// later); what they log goes to each controller's own buffer anyway.
	SetProcessLoggers(slog.New(slog.DiscardHandler))
	k8stest.Main(m, func(e *k8stest.Env) { testEnv = e })
}

var nsSeq atomic.Int64

// namespace creates a namespace of its own for t, opted in for worker
// pools.
func namespace(t *testing.T) string {
	t.Helper()
	return namespaceLabelled(t, map[string]string{PoolNamespaceLabel: PoolNamespaceAllowed})
}

// namespaceLabelled creates a namespace of its own for t with labels.
func namespaceLabelled(t *testing.T, labels map[string]string) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%d", time.Now().UnixNano()%1e6, nsSeq.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := testEnv.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return name
}

// fakeControl is the API server as the controller sees it: ListWorkers
// and ListNodes from tables, DrainNode and RemoveNode recorded.
type fakeControl struct {
	atev1.UnimplementedControlServer

	mu          sync.Mutex
	workers     []*atev1.Worker
	nodes       []*atev1.Node
	drained     []string
	removed     []string
	unavailable bool
}

func (f *fakeControl) err() error {
	if f.unavailable {
		return status.Error(codes.Unavailable, "fake: API server down")
	}
	return nil
}

func (f *fakeControl) ListWorkers(context.Context, *atev1.ListWorkersRequest) (*atev1.ListWorkersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &atev1.ListWorkersResponse{Workers: f.workers}, f.err()
}

func (f *fakeControl) ListNodes(context.Context, *atev1.ListNodesRequest) (*atev1.ListNodesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &atev1.ListNodesResponse{Nodes: f.nodes}, f.err()
}

func (f *fakeControl) DrainNode(_ context.Context, r *atev1.DrainNodeRequest) (*atev1.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.err(); err != nil {
		return nil, err
	}
	f.drained = append(f.drained, r.GetName()+": "+r.GetReason())
	return &atev1.Node{Name: r.GetName(), Phase: atev1.Node_DRAINING}, nil
}

func (f *fakeControl) RemoveNode(_ context.Context, r *atev1.RemoveNodeRequest) (*atev1.RemoveNodeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.err(); err != nil {
		return nil, err
	}
	f.removed = append(f.removed, r.GetName()+": "+r.GetReason())
	var kept []*atev1.Worker
	for _, w := range f.workers {
		if w.GetNode() != r.GetName() {
			kept = append(kept, w)
		}
	}
	f.workers = kept
	return &atev1.RemoveNodeResponse{}, nil
}

// set replaces the tables.
func (f *fakeControl) set(workers []*atev1.Worker, nodes []*atev1.Node) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers, f.nodes = workers, nodes
}

func (f *fakeControl) setUnavailable(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unavailable = v
}

// calls returns copies of the recorded drains and removals.
func (f *fakeControl) calls() (drained, removed []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.drained...), append([]string(nil), f.removed...)
}

// startFake serves f on a loopback port until t ends and returns the
// address.
func startFake(t *testing.T, f *fakeControl) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	atev1.RegisterControlServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// running is a controller started by startController.
type running struct {
	c    *Controller
	log  *testlog.Buffer
	stop func() // stops it and waits for Run to return
}

// startController runs a controller for namespace ns with cfg's
// defaults filled in (fast timings), as rc (testEnv's admin when nil),
// until t ends or stop is called.
func startController(t *testing.T, ns string, rc *rest.Config, cfg Config) *running {
	t.Helper()
	if rc == nil {
		rc = testEnv.Config
	}
	logs := &testlog.Buffer{}
	cfg.RestConfig, cfg.Namespace = rc, ns
	cfg.ManagementAddr = "127.0.0.1:0"
	if cfg.Workers.Image == "" {
		cfg.Workers.Image = "ate:test"
	}
	if cfg.Workers.CertIssuer == "" && !cfg.Workers.Insecure && !cfg.Workers.TLSBootstrap {
		// No kubelet runs the worker Pods here; New wants a choice.
		cfg.Workers.Insecure = true
	}
	if cfg.SyncTimeout == 0 {
		cfg.SyncTimeout = 3 * time.Second
	}
	if cfg.Resync == 0 {
		cfg.Resync = 200 * time.Millisecond
	}
	if cfg.LeaderElect && cfg.LeaderElectionNamespace == "" {
		cfg.LeaderElectionNamespace = ns
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() { // runs after stop below
		if t.Failed() {
			t.Logf("controller log:\n%s", logs.String())
		}
	})
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("controller Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &running{c: c, log: logs, stop: stop}
}

// readyz returns the controller's /readyz status code and body.
func (r *running) readyz(t *testing.T) (int, string) {
	t.Helper()
	return httpGet(t, "http://"+r.c.ManagementAddr()+"/readyz")
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// restrictedUser returns a connection as a new user bound (cluster-wide)
// to rules.
func restrictedUser(t *testing.T, name string, rules []rbacv1.PolicyRule) *rest.Config {
	t.Helper()
	ctx := t.Context()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if err := testEnv.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
	}
	if err := testEnv.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	return testEnv.AddUser(t, name)
}

var workerPoolsGVR = k8stest.WorkerPools

// unstructuredString reads a string field of an unstructured object.
func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	return unstructured.NestedString(obj, fields...)
}

func timeNow() time.Time { return time.Now() }

const timeSecond = time.Second
