package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	atev1 "substrate.dev/ate/api/ate/v1"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// Names of the reconcile paths (controllers), in logs, metrics
// (controller_runtime_reconcile_total{controller}) and /readyz.
const (
	poolController          = "workerpool"
	nodesController         = "workerpod-nodes"
	sandboxConfigController = "sandboxconfig"
)

// paths returns the three reconcile paths as supervised runnables. Each
// watches only its own kinds, through a cache of its own, so one kind
// that cannot be watched idles only the path that needs it.
func (c *Controller) paths(mgr manager.Manager, api atev1.ControlClient) ([]*supervised, error) {
	nudge := make(chan event.GenericEvent, 1)
	opts := func(r reconcile.Reconciler) controller.Options {
		// Several pools reconcile at once: one pool's slow API server
		// calls (drains of many terminating Pods) must not hold up
		// another's past its Pods' grace period. A key (pool) is never
		// reconciled twice at once.
		return controller.Options{Reconciler: r, Logger: mgr.GetLogger(), SkipNameValidation: ptr.To(true),
			CacheSyncTimeout: c.cfg.SyncTimeout, NeedLeaderElection: ptr.To(true), MaxConcurrentReconciles: maxConcurrentReconciles}
	}
	var errs []error
	// newPath returns a path's cache and a client reading from it
	// (writing directly).
	newPath := func() (cache.Cache, client.Client) {
		pc, err := cache.New(mgr.GetConfig(), c.cacheOptions(mgr))
		if err != nil {
			errs = append(errs, err)
			return nil, nil
		}
		cl, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
			Cache: &client.CacheOptions{Reader: pc}})
		if err != nil {
			errs = append(errs, err)
		}
		return pc, cl
	}
	sup := func(name string, pc cache.Cache, kinds []client.Object, resources []string, build func() (controller.Controller, error)) *supervised {
		return &supervised{name: name, kinds: kinds, resources: resources, build: build, cache: pc,
			health: c.health, timeout: c.cfg.SyncTimeout, retry: c.cfg.SyncTimeout, log: c.log}
	}

	poolCache, poolClient := newPath()
	pools := &poolReconciler{client: poolClient, live: mgr.GetAPIReader(), settings: c.cfg.Workers, log: c.log,
		events: mgr.GetEventRecorder(FieldManager)}
	poolPath := sup(poolController, poolCache, []client.Object{&atek8s.WorkerPool{}, &appsv1.Deployment{}, &corev1.Namespace{}}, []string{"workerpools", "deployments", "namespaces"},
		func() (controller.Controller, error) {
			ctl, err := controller.NewUnmanaged(poolController, opts(pools))
			if err != nil {
				return nil, err
			}
			allPools := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
				var list atek8s.WorkerPoolList
				if err := poolClient.List(ctx, &list); err != nil {
					c.log.Warn("SandboxConfig change not passed on to pools", "err", err)
					return nil
				}
				var reqs []reconcile.Request
				for _, p := range list.Items {
					reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
				}
				return reqs
			})
			for _, s := range []source.Source{
				source.Kind(poolCache, &atek8s.WorkerPool{}, &handler.TypedEnqueueRequestForObject[*atek8s.WorkerPool]{}),
				source.Kind(poolCache, &appsv1.Deployment{}, handler.TypedEnqueueRequestForOwner[*appsv1.Deployment](
					mgr.GetScheme(), mgr.GetRESTMapper(), &atek8s.WorkerPool{}, handler.OnlyControllerOwner())),
				source.Channel(nudge, allPools),
				source.Kind(poolCache, &corev1.Namespace{}, namespaceEvents(poolClient, c.log)),
			} {
				if err := ctl.Watch(s); err != nil {
					return nil, err
				}
			}
			return ctl, nil
		})

	nodesCache, nodesClient := newPath()
	nodes := &nodesReconciler{client: nodesClient, live: mgr.GetAPIReader(), api: api, metrics: c.metrics,
		deleted: &deletedPods{}, log: c.log}
	nodesPath := sup(nodesController, nodesCache, []client.Object{&corev1.Pod{}}, []string{"pods"},
		func() (controller.Controller, error) {
			ctl, err := controller.NewUnmanaged(nodesController, opts(nodes))
			if err != nil {
				return nil, err
			}
			for _, s := range []source.Source{
				source.Kind(nodesCache, &corev1.Pod{}, podEvents(nodes.deleted)),
				source.Func(c.resyncNodes(mgr.GetAPIReader(), api)),
			} {
				if err := ctl.Watch(s); err != nil {
					return nil, err
				}
			}
			return ctl, nil
		})

	configCache, configClient := newPath()
	configs := &sandboxConfigReconciler{client: configClient, poolNudge: nudge, log: c.log}
	configPath := sup(sandboxConfigController, configCache, []client.Object{&atek8s.SandboxConfig{}}, []string{"sandboxconfigs"},
		func() (controller.Controller, error) {
			ctl, err := controller.NewUnmanaged(sandboxConfigController, opts(configs))
			if err != nil {
				return nil, err
			}
			one := handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *atek8s.SandboxConfig) []reconcile.Request {
				return []reconcile.Request{allConfigs}
			})
			if err := ctl.Watch(source.Kind(configCache, &atek8s.SandboxConfig{}, one)); err != nil {
				return nil, err
			}
			return ctl, nil
		})
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	return []*supervised{poolPath, nodesPath, configPath}, nil
}

// namespaceEvents queues a namespace's pools when its opt-in label
// (PoolNamespaceLabel) changes: a namespace the operator withdraws has
// its pools' Deployments scaled to zero at once, and one opted in runs
// its waiting pools, rather than whenever each pool next changes.
// Other namespace changes queue nothing.
func namespaceEvents(pools client.Reader, log *slog.Logger) handler.TypedEventHandler[*corev1.Namespace, reconcile.Request] {
	queue := func(ctx context.Context, ns string, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		var list atek8s.WorkerPoolList
		if err := pools.List(ctx, &list, client.InNamespace(ns)); err != nil {
			log.Warn("namespace label change not passed on to its pools; they see it at their next change", "namespace", ns, "err", err)
			return
		}
		for i := range list.Items {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return handler.TypedFuncs[*corev1.Namespace, reconcile.Request]{
		// Create (also each namespace listed at start): the pools'
		// own create events reconcile them then; nothing to add.
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*corev1.Namespace], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.Labels[PoolNamespaceLabel] != e.ObjectNew.Labels[PoolNamespaceLabel] {
				queue(ctx, e.ObjectNew.Name, q)
			}
		},
	}
}

// podEvents maps a worker Pod's events to its pool's key, and remembers
// deleted Pods for their node's removal.
func podEvents(deleted *deletedPods) handler.TypedEventHandler[*corev1.Pod, reconcile.Request] {
	key := func(p *corev1.Pod) (reconcile.Request, bool) {
		pool := p.Labels[atek8s.PoolLabel]
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: pool}}, pool != ""
	}
	add := func(p *corev1.Pod, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if k, ok := key(p); ok {
			q.Add(k)
		}
	}
	return handler.TypedFuncs[*corev1.Pod, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if k, ok := key(e.Object); ok {
				deleted.add(k.NamespacedName, e.Object.Name)
				q.Add(k)
			}
		},
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
	}
}

// resyncNodes is a source that every Resync queues every pool: those
// the Kubernetes API server lists (read live, so that this path needs no
// WorkerPool watch; a pool without Pods gets no Pod event, yet needs its
// status) and those the API server has workers of (a deleted pool's
// nodes must still be removed). Either list failing is logged and the
// other still queues its pools.
func (c *Controller) resyncNodes(live client.Reader, api atev1.ControlClient) source.Func {
	return func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			t := time.NewTicker(c.cfg.Resync)
			defer t.Stop()
			for {
				c.queuePools(ctx, live, q)
				c.queuePoolsWithWorkers(ctx, api, q)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
		return nil
	}
}

func (c *Controller) queuePools(ctx context.Context, live client.Reader, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	var list atek8s.WorkerPoolList
	var opts []client.ListOption
	if c.cfg.Namespace != "" {
		opts = append(opts, client.InNamespace(c.cfg.Namespace))
	}
	if err := live.List(ctx, &list, opts...); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("resync: WorkerPools not listed; pools are still found from Pods and the API server's workers", "err", err)
		}
		return
	}
	for i := range list.Items {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
}

func (c *Controller) queuePoolsWithWorkers(ctx context.Context, api atev1.ControlClient, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	cctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	ws, err := api.ListWorkers(cctx, &atev1.ListWorkersRequest{})
	c.metrics.observe("ListWorkers", err)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("resync: the API server's workers not listed; pools are still found from Pods and WorkerPools", "err", err)
		}
		return
	}
	seen := map[types.NamespacedName]bool{}
	for _, w := range ws.GetWorkers() {
		k := types.NamespacedName{Namespace: w.GetLabels()[atek8s.NamespaceLabel], Name: w.GetLabels()[atek8s.PoolLabel]}
		if k.Name == "" || k.Namespace == "" || seen[k] || (c.cfg.Namespace != "" && k.Namespace != c.cfg.Namespace) {
			continue
		}
		seen[k] = true
		q.Add(reconcile.Request{NamespacedName: k})
	}
}

// maxConcurrentReconciles is how many keys (pools, SandboxConfigs) a
// path reconciles at once.
const maxConcurrentReconciles = 4
