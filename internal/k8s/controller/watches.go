package controller

import (
	"context"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
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
// watches only its own kinds, so one kind that cannot be watched idles
// only the path that needs it.
func (c *Controller) paths(mgr manager.Manager, api atev1.ControlClient) []*supervised {
	nudge := make(chan event.GenericEvent, 1)
	cache := mgr.GetCache()
	opts := func(r reconcile.Reconciler) controller.Options {
		return controller.Options{Reconciler: r, Logger: mgr.GetLogger(), SkipNameValidation: ptr.To(true),
			CacheSyncTimeout: c.cfg.SyncTimeout, NeedLeaderElection: ptr.To(true)}
	}
	sup := func(name string, kinds []client.Object, resources []string, build func() (controller.Controller, error)) *supervised {
		return &supervised{name: name, kinds: kinds, resources: resources, build: build, cache: cache,
			health: c.health, timeout: c.cfg.SyncTimeout, retry: c.cfg.SyncTimeout, log: c.log}
	}

	pools := &poolReconciler{client: mgr.GetClient(), live: mgr.GetAPIReader(), settings: c.cfg.Workers, log: c.log}
	poolPath := sup(poolController, []client.Object{&atek8s.WorkerPool{}, &appsv1.Deployment{}}, []string{"workerpools", "deployments"},
		func() (controller.Controller, error) {
			ctl, err := controller.NewUnmanaged(poolController, opts(pools))
			if err != nil {
				return nil, err
			}
			allPools := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
				var list atek8s.WorkerPoolList
				if err := mgr.GetClient().List(ctx, &list); err != nil {
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
				source.Kind(cache, &atek8s.WorkerPool{}, &handler.TypedEnqueueRequestForObject[*atek8s.WorkerPool]{}),
				source.Kind(cache, &appsv1.Deployment{}, handler.TypedEnqueueRequestForOwner[*appsv1.Deployment](
					mgr.GetScheme(), mgr.GetRESTMapper(), &atek8s.WorkerPool{}, handler.OnlyControllerOwner())),
				source.Channel(nudge, allPools),
			} {
				if err := ctl.Watch(s); err != nil {
					return nil, err
				}
			}
			return ctl, nil
		})

	nodes := &nodesReconciler{client: mgr.GetClient(), live: mgr.GetAPIReader(), api: api, metrics: c.metrics,
		deleted: &deletedPods{}, resync: c.cfg.Resync, log: c.log}
	nodesPath := sup(nodesController, []client.Object{&corev1.Pod{}}, []string{"pods"},
		func() (controller.Controller, error) {
			ctl, err := controller.NewUnmanaged(nodesController, opts(nodes))
			if err != nil {
				return nil, err
			}
			for _, s := range []source.Source{
				source.Kind(cache, &corev1.Pod{}, podEvents(nodes.deleted)),
				source.Func(c.resyncNodes(api)),
			} {
				if err := ctl.Watch(s); err != nil {
					return nil, err
				}
			}
			return ctl, nil
		})

	configs := &sandboxConfigReconciler{client: mgr.GetClient(), poolNudge: nudge, log: c.log}
	configPath := sup(sandboxConfigController, []client.Object{&atek8s.SandboxConfig{}}, []string{"sandboxconfigs"},
		func() (controller.Controller, error) {
			ctl, err := controller.NewUnmanaged(sandboxConfigController, opts(configs))
			if err != nil {
				return nil, err
			}
			one := handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *atek8s.SandboxConfig) []reconcile.Request {
				return []reconcile.Request{allConfigs}
			})
			if err := ctl.Watch(source.Kind(cache, &atek8s.SandboxConfig{}, one)); err != nil {
				return nil, err
			}
			return ctl, nil
		})
	return []*supervised{poolPath, nodesPath, configPath}
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

// resyncNodes is a source that every Resync lists the API server's
// workers and queues each pool (of the watched namespaces) that has
// any: a pool whose Pods are all gone gets no Pod event, yet its nodes
// must still be removed.
func (c *Controller) resyncNodes(api atev1.ControlClient) source.Func {
	return func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			t := time.NewTicker(c.cfg.Resync)
			defer t.Stop()
			for {
				c.queuePoolsWithWorkers(ctx, api, q, c.log)
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

func (c *Controller) queuePoolsWithWorkers(ctx context.Context, api atev1.ControlClient, q workqueue.TypedRateLimitingInterface[reconcile.Request], log *slog.Logger) {
	cctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	ws, err := api.ListWorkers(cctx, &atev1.ListWorkersRequest{})
	c.metrics.observe("ListWorkers", err)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("resync: API server's workers not listed", "err", err)
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
