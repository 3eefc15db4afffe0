// Package k8stest starts a real Kubernetes control plane (kube-apiserver
// and etcd, no kubelet) for tests, through controller-runtime's envtest,
// with the binaries hack/install-kube.sh builds and caches. A missing
// binary fails the test, never skips it.
//
// With no kubelet, Pods stay Pending unless a test writes their status,
// and a Pod bound to a node (spec.nodeName) stays Terminating after a
// graceful delete until it is deleted again with grace period 0.
package k8stest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

var loggerOnce sync.Once

// Env is a running control plane.
type Env struct {
	// Config is an admin's (system:masters) connection.
	Config *rest.Config
	// Client is a controller-runtime client over Config whose scheme
	// knows core types and ate.substrate.dev/v1alpha1.
	Client client.Client
	// Clientset is a typed client-go clientset over Config.
	Clientset *kubernetes.Clientset
	// Kubeconfig is the path of a kubeconfig file for Config.
	Kubeconfig string

	env *envtest.Environment
}

// BinDir is where hack/install-kube.sh puts kube-apiserver and etcd.
func BinDir() string {
	cache := os.Getenv("ATE_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "ate")
	}
	return filepath.Join(cache, "kube", "bin")
}

// RepoRoot is the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Scheme knows core Kubernetes types and Substrate's.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := atek8s.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Start starts kube-apiserver and etcd with the CRDs of deploy/crds
// installed, and stops them when t ends. Authorization is RBAC: users
// made with AddUser have only the permissions a test binds to them.
func Start(t testing.TB) *Env {
	t.Helper()
	env, err := StartShared(t.TempDir())
	if err != nil {
		t.Fatalf("k8stest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("k8stest: stop: %v", err)
		}
	})
	return env
}

// StartShared is Start for a package's TestMain (one control plane for
// all its tests): the kubeconfig goes into dir, and the caller calls
// Stop. Errors: a binary not built, a failed start.
func StartShared(dir string) (*Env, error) {
	bin := BinDir()
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("%s not built (%w): run hack/install-kube.sh", b, err)
		}
	}
	// envtest logs through controller-runtime's package logger, which
	// prints a stack trace when nobody set it; tests read the control
	// plane's state, not its log, so it is discarded (once per process).
	loggerOnce.Do(func() { ctrllog.SetLogger(logr.Discard()) })
	e := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "deploy", "crds")},
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
	}
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver and etcd: %w", err)
	}
	env := &Env{Config: cfg, env: e}
	if err := env.init(dir); err != nil {
		_ = e.Stop()
		return nil, err
	}
	return env, nil
}

func (e *Env) init(dir string) error {
	c, err := client.New(e.Config, client.Options{Scheme: e.env.Scheme})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return fmt.Errorf("clientset: %w", err)
	}
	data, err := kubeconfigFor(e.Config)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	e.Client, e.Clientset, e.Kubeconfig = c, cs, filepath.Join(dir, "kubeconfig")
	return os.WriteFile(e.Kubeconfig, data, 0o600)
}

// Stop stops kube-apiserver and etcd.
func (e *Env) Stop() error { return e.env.Stop() }

// AddUser returns a connection as a user with name and groups and no
// permissions but those a test binds to it (RBAC).
func (e *Env) AddUser(t testing.TB, name string, groups ...string) *rest.Config {
	t.Helper()
	u, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		t.Fatalf("k8stest: add user %s: %v", name, err)
	}
	return u.Config()
}

// WriteKubeconfig writes a kubeconfig file for cfg into t's temp dir and
// returns its path.
func (e *Env) WriteKubeconfig(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	data, err := kubeconfigFor(cfg)
	if err != nil {
		t.Fatalf("k8stest: kubeconfig: %v", err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// GVR of the Substrate resources, for dynamic and scale clients.
var (
	WorkerPools    = schema.GroupVersionResource{Group: atek8s.GroupVersion.Group, Version: atek8s.GroupVersion.Version, Resource: "workerpools"}
	SandboxConfigs = schema.GroupVersionResource{Group: atek8s.GroupVersion.Group, Version: atek8s.GroupVersion.Version, Resource: "sandboxconfigs"}
)

// Main is a package's TestMain over one shared control plane: it starts
// it, hands it to use, runs the tests, stops it and exits. A control
// plane that does not start fails the package (exit 1), never skips it.
func Main(m *testing.M, use func(*Env)) {
	os.Exit(runMain(m, use))
}

func runMain(m *testing.M, use func(*Env)) int {
	dir, err := os.MkdirTemp("", "k8stest")
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8stest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	env, err := StartShared(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8stest:", err)
		return 1
	}
	use(env)
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "k8stest: stop:", err)
		code = 1
	}
	return code
}
