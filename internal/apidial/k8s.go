package apidial

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	k8sresolver "substrate.dev/ate/internal/k8s/resolver"
)

// k8sOption is an apidial setting carried among grpc.DialOptions, so
// Dial keeps its signature for every caller; grpc-go ignores it
// (grpc.EmptyDialOption).
type k8sOption struct {
	grpc.EmptyDialOption
	apply func(*k8sSettings)
}

// k8sSettings are what k8s:/// targets are dialled with.
type k8sSettings struct {
	kubeconfig, context string
	resolver            k8sresolver.Options
}

// WithKubeconfig makes k8s:/// targets use the kubeconfig file at path
// (empty: client-go's default loading rules, $KUBECONFIG, ~/.kube/config,
// else in-cluster) and its context kubeContext (empty: the file's
// current context). Other targets ignore it.
func WithKubeconfig(path, kubeContext string) grpc.DialOption {
	return k8sOption{apply: func(s *k8sSettings) { s.kubeconfig, s.context = path, kubeContext }}
}

// WithSyncTimeout bounds how long DialContext waits for a k8s:///
// target's EndpointSlices to be listed (default
// k8sresolver.DefaultSyncTimeout, 30 s).
func WithSyncTimeout(d time.Duration) grpc.DialOption {
	return k8sOption{apply: func(s *k8sSettings) { s.resolver.SyncTimeout = d }}
}

// WithLogger is where a k8s:/// target's resolver logs list and watch
// failures (default slog.Default()).
func WithLogger(l *slog.Logger) grpc.DialOption {
	return k8sOption{apply: func(s *k8sSettings) { s.resolver.Logger = l }}
}

func k8sSettingsOf(opts []grpc.DialOption) k8sSettings {
	var s k8sSettings
	for _, o := range opts {
		if k, ok := o.(k8sOption); ok {
			k.apply(&s)
		}
	}
	return s
}

// kubeconfig loads what WithKubeconfig(path, kubeContext) names, the
// one loader of kubeconfigs here, so KubeContext reports the context
// kubeClient dials through.
func kubeconfig(path, kubeContext string) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
}

// KubeContext is the name of the kubeconfig context that k8s:/// targets
// dialled with WithKubeconfig(path, kubeContext) go through: kubeContext
// if set, else the current-context of the kubeconfig found (empty when
// there is none, as in a Pod, where the in-cluster config has no
// contexts). Clients name their own settings for a cluster after it (the
// CLI's ate contexts). Errors: an unreadable kubeconfig.
func KubeContext(path, kubeContext string) (string, error) {
	if kubeContext != "" {
		return kubeContext, nil
	}
	raw, err := kubeconfig(path, "").RawConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig: %w", err)
	}
	return raw.CurrentContext, nil
}

// kubeClient builds a clientset from s's kubeconfig. Called only for
// k8s:/// targets: nothing else needs a kubeconfig or in-cluster env.
func kubeClient(s k8sSettings) (kubernetes.Interface, error) {
	cfg, err := kubeconfig(s.kubeconfig, s.context).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig for k8s:/// API server targets: %w", err)
	}
	cfg.UserAgent = "ate"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, nil
}

// dialK8s dials a k8s:/// target (DialContext): the connection's
// resolver is built over a watch this function has seen sync.
func dialK8s(ctx context.Context, target string, opts []grpc.DialOption) (*grpc.ClientConn, error) {
	if err := validate(target); err != nil {
		return nil, err
	}
	t, _ := k8sresolver.ParseTarget(target) // validated
	s := k8sSettingsOf(opts)
	cs, err := kubeClient(s)
	if err != nil {
		return nil, fmt.Errorf("connect to API server %s: %w", target, err)
	}
	b := k8sresolver.NewBuilder(cs, s.resolver)
	// Our hold on the watch lasts until the connection's resolver holds
	// it too, so the resolver starts on the synced cache, not a new one.
	w, release := b.Acquire(t)
	defer release()
	if err := w.WaitSynced(ctx); err != nil {
		return nil, fmt.Errorf("connect to API server %s: %w", target, err)
	}
	conn, err := newClient(target, t.String(), []grpc.DialOption{grpc.WithResolvers(b)}, opts)
	if err != nil {
		return nil, err
	}
	// Builds the resolver now (grpc-go builds it on leaving idle), so it
	// joins the synced watch before release.
	conn.Connect()
	return conn, nil
}

// k8sReplicas is Replicas for a k8s:/// target: a ReplicaLister's
// watch, synced once and stopped (the resolver's one way of reading
// endpoints, so the port mapping and readiness rules live in one place).
func k8sReplicas(ctx context.Context, target string, opts []grpc.DialOption) ([]string, error) {
	l, err := NewReplicaLister(target, opts...)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	return l.List(ctx)
}

// ReplicaLister lists a target's replicas for a caller that asks again
// and again (nodeagent.Agent re-resolves every few seconds). For a
// k8s:/// target it keeps one EndpointSlice watch (a shared informer)
// for its lifetime and answers from its cache: no list per call, which
// at a thousand worker Pods asking every 10 s would be a hundred
// EndpointSlice lists a second on the Kubernetes API server. Other
// targets are resolved on each call, as Replicas.
type ReplicaLister struct {
	target  string
	opts    []grpc.DialOption
	watch   *k8sresolver.Watch
	release func()
}

// NewReplicaLister returns a lister of target's replicas (opts as for
// DialContext). Errors: a malformed target, a kubeconfig that cannot be
// loaded. Close it when done.
func NewReplicaLister(target string, opts ...grpc.DialOption) (*ReplicaLister, error) {
	if _, err := Split(target); err != nil {
		return nil, err
	}
	l := &ReplicaLister{target: target, opts: opts, release: func() {}}
	if !strings.HasPrefix(target, k8sresolver.Scheme+":///") {
		return l, nil
	}
	t, _ := k8sresolver.ParseTarget(target) // validated by Split
	s := k8sSettingsOf(opts)
	cs, err := kubeClient(s)
	if err != nil {
		return nil, fmt.Errorf("resolve API server replicas %s: %w", target, err)
	}
	l.watch, l.release = k8sresolver.NewBuilder(cs, s.resolver).Acquire(t)
	return l, nil
}

// List returns the replicas now (host:port each, sorted). For k8s:///
// it waits for the watch's first sync (within its bound) and returns
// its errors naming the permission missing, as Replicas.
func (l *ReplicaLister) List(ctx context.Context) ([]string, error) {
	if l.watch == nil {
		return Replicas(ctx, l.target, l.opts...)
	}
	if err := l.watch.WaitSynced(ctx); err != nil {
		return nil, fmt.Errorf("resolve API server replicas %s: %w", l.target, err)
	}
	return l.watch.Addresses(), nil
}

// Close stops the watch, if any.
func (l *ReplicaLister) Close() { l.release() }
