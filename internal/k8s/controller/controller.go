// Package controller is Substrate's Kubernetes controller (`ate
// controller`): WorkerPools become Deployments of worker Pods that each
// run `ate node`, and worker Pods' lives are told to the API server
// (drain when terminating, removal when deleted, deletion costs from what
// each hosts). Its reconcile paths are independent: none lists another's
// kind as a precondition of its own job, and a kind that cannot be
// watched idles only the path that needs it, reported by /readyz
// (docs/design/controller.md).
package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/apidial"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/runner"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// Defaults of Config.
const (
	DefaultManagementAddr = ":8081"
	DefaultSyncTimeout    = 30 * time.Second
	DefaultResync         = 30 * time.Second
	// LeaderElectionID names the Lease the replicas elect a leader by.
	LeaderElectionID = "ate-controller"
)

// Config is `ate controller`'s settings.
type Config struct {
	// API is the API server's gRPC address for the controller
	// (apidial.Dial's forms). Required.
	API string
	// Workers are the worker Pods' settings; an empty Workers.API means
	// API.
	Workers WorkerSettings
	// Kubeconfig is a kubeconfig file; empty: in-cluster, else the
	// default loading rules ($KUBECONFIG, ~/.kube/config). RestConfig,
	// if set, is used instead (tests).
	Kubeconfig string
	RestConfig *rest.Config
	// Namespace limits the controller to one namespace's pools and Pods;
	// empty: all.
	Namespace string
	// LeaderElect runs leader election over a Lease named
	// LeaderElectionID in LeaderElectionNamespace (empty: the Pod's own
	// namespace). Only the leader reconciles.
	LeaderElect             bool
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election
	// (zero: controller-runtime's 15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// SyncTimeout bounds the wait for a reconcile path's watches; past it
	// /readyz names what is missing and the path retries. Default
	// DefaultSyncTimeout.
	SyncTimeout time.Duration
	// Resync is how often every pool's nodes are compared with the API
	// server's without an event. Default DefaultResync.
	Resync time.Duration
	// ManagementAddr serves /healthz, /readyz and /metrics.
	// Default DefaultManagementAddr.
	ManagementAddr string
	// PprofAddr serves net/http/pprof (httpserve.NewPprof: loopback
	// only); empty means none.
	PprofAddr string
	// TLS are the --tls-dir, --insecure and --trust-domain flags; the
	// caller loads them into Transport (pki.Settings.Load).
	TLS pki.Settings
	// Transport is the controller's TLS to the API server (a controller
	// certificate, internal/pki); nil: plaintext (--insecure).
	Transport *pki.Transport
	Logger    *slog.Logger
}

// Controller is a configured, listening controller; Run runs it.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	health  *health
	metrics *Metrics
	mgr     manager.Manager
	conn    *grpc.ClientConn
	mgmt    *httpserve.Management
}

// New checks cfg, connects (lazily) to the API server and the
// Kubernetes API server, and listens on cfg.ManagementAddr. Errors: a
// bad setting, an unreadable kubeconfig, the listen.
func New(cfg Config) (*Controller, error) {
	if cfg.API == "" {
		return nil, errors.New("controller: --api is required")
	}
	if cfg.Workers.API == "" {
		cfg.Workers.API = cfg.API
	}
	if err := cfg.Workers.validateTLS(); err != nil {
		return nil, err
	}
	if cfg.SyncTimeout <= 0 {
		cfg.SyncTimeout = DefaultSyncTimeout
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.ManagementAddr == "" {
		cfg.ManagementAddr = DefaultManagementAddr
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rc := cfg.RestConfig
	if rc == nil {
		var err error
		if rc, err = RESTConfig(cfg.Kubeconfig); err != nil {
			return nil, fmt.Errorf("controller: %w", err)
		}
	}
	if cfg.Workers.Image == "" {
		img, err := ownImage(rc)
		if err != nil {
			return nil, err
		}
		cfg.Workers.Image = img
		log.Info("worker image: the controller's own", "image", img)
	}
	c := &Controller{cfg: cfg, log: log, health: newHealth(log)}
	var err error
	if c.metrics, err = NewMetrics(crmetrics.Registry); err != nil {
		return nil, fmt.Errorf("controller: metrics: %w", err)
	}
	if c.mgr, err = c.newManager(rc); err != nil {
		return nil, err
	}
	// A k8s:/// --api reads the same cluster's EndpointSlices, with the
	// controller's kubeconfig.
	if c.conn, err = apidial.Dial(cfg.API, apidial.WithKubeconfig(cfg.Kubeconfig, ""), apidial.WithLogger(log),
		cfg.Transport.DialOption(auth.ComponentAPIServer)); err != nil {
		return nil, err
	}
	paths, err := c.paths(c.mgr, atev1.NewControlClient(c.conn))
	if err != nil {
		_ = c.conn.Close()
		return nil, err
	}
	for _, p := range paths {
		if err := c.mgr.Add(p); err != nil {
			_ = c.conn.Close()
			return nil, fmt.Errorf("controller: %w", err)
		}
	}
	if c.mgmt, err = httpserve.NewManagement(cfg.ManagementAddr, crmetrics.Registry, c.health.ready); err != nil {
		_ = c.conn.Close()
		return nil, fmt.Errorf("controller: %w", err)
	}
	return c, nil
}

// ManagementAddr is the address /healthz, /readyz and /metrics are
// served on.
func (c *Controller) ManagementAddr() string { return c.mgmt.Addr() }

// Run serves the management listener, takes part in the leader
// election and, while leader, reconciles, until ctx ends. Errors: the
// manager's (e.g. leadership lost, after which the process must exit so
// that no two leaders reconcile).
func (c *Controller) Run(ctx context.Context) error {
	defer c.conn.Close()
	c.log.InfoContext(ctx, "ate controller ready", "management", c.ManagementAddr(), "api", c.cfg.API,
		"leader-elect", c.cfg.LeaderElect, "namespace", c.cfg.Namespace)
	stopPprof, err := httpserve.StartPprof(ctx, c.cfg.PprofAddr)
	if err != nil {
		c.mgmt.Close()
		return fmt.Errorf("controller: %w", err)
	}
	defer stopPprof()
	// The same runner as every other component's (internal/runner): the
	// management listener first, so it outlives the manager's stop and
	// /readyz can be watched while the reconcilers finish.
	r := runner.New(c.log)
	r.Add("management", c.mgmt.Serve)
	r.Add("manager", func(ctx context.Context) error {
		if err := c.mgr.Start(ctx); err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		return nil
	})
	return r.Run(ctx)
}

// Run is `ate controller`'s one assembly: it loads cfg.TLS into
// cfg.Transport, gives worker Pods the controller's trust domain unless
// cfg says otherwise, points controller-runtime's and client-go's logs
// at cfg.Logger, and runs the controller until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	SetProcessLoggers(cfg.Logger)
	var err error
	if cfg.Transport, err = cfg.TLS.Load(ctx, auth.ComponentController, cfg.Logger); err != nil {
		return err
	}
	// Worker Pods' nodes talk to the same API server, so they share the
	// controller's trust domain unless --worker-trust-domain says otherwise.
	cfg.Workers.TrustDomain = cmp.Or(cfg.Workers.TrustDomain, cfg.TLS.TrustDomain)
	if cfg.Workers.TLSBootstrap && cfg.TLS.Dir != "" && len(cfg.Workers.CACert) == 0 {
		// Worker Pods trust the API server by the CA we trust it by.
		if cfg.Workers.CACert, err = os.ReadFile(filepath.Join(cfg.TLS.Dir, pki.CAFile)); err != nil {
			return fmt.Errorf("controller: --worker-tls-bootstrap: %w", err)
		}
	}
	c, err := New(cfg)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// newManager builds the controller-runtime manager: leader election
// and the runnables' lifecycle, no listeners of its own (the management
// listener serves its registry). Its own cache is unused: each path has
// one (cacheOptions).
func (c *Controller) newManager(rc *rest.Config) (manager.Manager, error) {
	logger := logr.FromSlogHandler(c.log.Handler())
	opts := manager.Options{
		Scheme:                        Scheme(),
		Logger:                        logger,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                c.cfg.LeaderElect,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       c.cfg.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(true)},
	}
	for _, d := range []struct {
		v   time.Duration
		dst **time.Duration
	}{{c.cfg.LeaseDuration, &opts.LeaseDuration}, {c.cfg.RenewDeadline, &opts.RenewDeadline}, {c.cfg.RetryPeriod, &opts.RetryPeriod}} {
		if d.v > 0 {
			*d.dst = &d.v
		}
	}
	mgr, err := manager.New(rc, opts)
	if err != nil {
		return nil, fmt.Errorf("controller: manager: %w", err)
	}
	return mgr, nil
}

// cacheOptions are a path's cache's: watch errors go to health (for
// /readyz), the watched namespace only, worker Pods and Deployments
// selected by label so that the cluster's other Pods are not cached.
func (c *Controller) cacheOptions(mgr manager.Manager) cache.Options {
	managed, err := labels.NewRequirement(managedByLabel, selection.Equals, []string{FieldManager})
	if err != nil {
		panic(err) // constant, valid arguments
	}
	inPool, err := labels.NewRequirement(atek8s.PoolLabel, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	workers := labels.NewSelector().Add(*managed, *inPool)
	opts := cache.Options{
		Scheme:                   mgr.GetScheme(),
		Mapper:                   mgr.GetRESTMapper(),
		DefaultWatchErrorHandler: c.health.watchError,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:        {Label: workers},
			&appsv1.Deployment{}: {Label: workers},
		},
	}
	if c.cfg.Namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{c.cfg.Namespace: {}}
	}
	return opts
}

// SetProcessLoggers points controller-runtime's and client-go's
// package loggers (they log through them besides the manager's, and
// controller-runtime warns with a stack when none was set) at log. Call
// it once, before New, from the process's wiring: klog's is not safe to
// set while anything logs.
func SetProcessLoggers(log *slog.Logger) {
	logger := logr.FromSlogHandler(log.Handler())
	ctrllog.SetLogger(logger)
	klog.SetLogger(logger)
}

// Scheme knows the kinds the controller reads and writes: Kubernetes'
// built-in types and ate.substrate.dev/v1alpha1.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(atek8s.AddToScheme(s))
	return s
}

// RESTConfig loads the Kubernetes connection: path, else in-cluster,
// else the default kubeconfig loading rules (the controller's, and the
// API server's when it issues node certificates).
func RESTConfig(path string) (*rest.Config, error) {
	if path != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
		return rc, nil
	}
	if rc, err := rest.InClusterConfig(); err == nil {
		return rc, nil
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no in-cluster config and no kubeconfig: %w", err)
	}
	return rc, nil
}

// ownImage is the image of the controller's own container, read from its
// Pod ($POD_NAMESPACE/$POD_NAME, from the downward API): so worker Pods
// run the same ate as the controller, whatever a kustomize images:
// override or a Helm value made of the controller's image. Errors: not
// in a Pod (say --worker-image), the Pod unreadable.
func ownImage(rc *rest.Config) (string, error) {
	ns, name := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	if ns == "" || name == "" {
		return "", errors.New("controller: --worker-image is required (or run in a Pod with POD_NAMESPACE and POD_NAME set, and the worker image is the controller's own)")
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return "", fmt.Errorf("controller: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiCallTimeout)
	defer cancel()
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("controller: read its own Pod %s/%s for the worker image (or give --worker-image): %w", ns, name, err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == ownContainer {
			return c.Image, nil
		}
	}
	if len(pod.Spec.Containers) == 1 {
		return pod.Spec.Containers[0].Image, nil
	}
	return "", fmt.Errorf("controller: its Pod %s/%s has no container named %q to take the worker image from: give --worker-image", ns, name, ownContainer)
}

// ownContainer is the controller's container name in the manifests.
const ownContainer = "controller"
