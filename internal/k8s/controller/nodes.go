package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	atev1 "substrate.dev/ate/api/ate/v1"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// nodesFieldManager owns the pool status fields the Pods → API server
// path writes (readyReplicas, readyWorkers, NodesSynced), apart from
// FieldManager's so neither path's apply removes the other's fields.
const nodesFieldManager = "ate-controller-nodes"

// apiCallTimeout bounds each call to the API server, so a replica that
// stands still holds a reconcile for at most this long.
const apiCallTimeout = 15 * time.Second

// nodesReconciler is the Pods → API server path, keyed per pool
// (namespace/pool). It lists the pool's Pods from the cache its own
// watch fills, and the workers and nodes from the API server; it reads
// the pool itself only for its status, live and optionally: a deleted
// pool's leftover nodes are still removed.
type nodesReconciler struct {
	client  client.Client
	live    client.Reader
	api     atev1.ControlClient
	metrics *Metrics
	deleted *deletedPods
	log     *slog.Logger
}

// deletedPods remembers worker Pods seen deleted until their node is
// removed, for the node whose workers the API server no longer lists
// (already LOST) and so would not be found by the worker scan.
type deletedPods struct {
	mu    sync.Mutex
	names map[types.NamespacedName]map[string]bool // pool → Pod names
}

func (d *deletedPods) add(pool types.NamespacedName, pod string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.names == nil {
		d.names = map[types.NamespacedName]map[string]bool{}
	}
	if d.names[pool] == nil {
		d.names[pool] = map[string]bool{}
	}
	d.names[pool][pod] = true
}

func (d *deletedPods) list(pool types.NamespacedName) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for n := range d.names[pool] {
		out = append(out, n)
	}
	return out
}

func (d *deletedPods) done(pool types.NamespacedName, pod string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.names[pool], pod)
	if len(d.names[pool]) == 0 {
		delete(d.names, pool)
	}
}

// apiView is what the API server said about the pool's nodes: nil
// fields when its calls failed.
type apiView struct {
	workers []*atev1.Worker // the pool's workers (pool and namespace labels)
	ready   map[string]bool // node name → READY
}

// Reconcile drains the nodes of terminating Pods, removes the nodes of
// deleted Pods, sets deletion costs, and writes readyReplicas,
// readyWorkers and NodesSynced. API server errors are reported (status,
// metric, returned for a backoff requeue), and the Pod-side work that
// needs no answer from it (readyReplicas) still happens.
func (r *nodesReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(req.Namespace), client.MatchingLabels{atek8s.PoolLabel: req.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("list Pods: %w", err)
	}
	byName := map[string]*corev1.Pod{}
	var readyReplicas int64
	for i := range pods.Items {
		p := &pods.Items[i]
		byName[p.Name] = p
		if p.DeletionTimestamp.IsZero() && podReady(p) {
			readyReplicas++
		}
	}
	view, apiErr := r.view(ctx, req.NamespacedName)
	var errs []error
	// An API server that did not answer the lists will not answer a
	// drain either: do not spend apiCallTimeout per Pod finding out
	// (the pass is retried with backoff), so other pools' passes go on.
	if !unreachable(apiErr) {
		for _, p := range pods.Items {
			if !p.DeletionTimestamp.IsZero() {
				errs = append(errs, r.drain(ctx, &p))
			}
		}
		errs = append(errs, r.removeGone(ctx, req.NamespacedName, view, byName))
	}
	if view.workers != nil {
		errs = append(errs, r.setDeletionCosts(ctx, view, pods.Items))
	}
	callErr := errors.Join(append(errs, apiErr)...)
	statusErr := r.writeStatus(ctx, req, readyReplicas, view, byName, callErr)
	if err := errors.Join(callErr, statusErr); err != nil {
		return reconcile.Result{}, err
	}
	// No RequeueAfter: the resync source queues every pool each Resync.
	return reconcile.Result{}, nil
}

// view asks the API server for the pool's workers and the nodes'
// phases.
func (r *nodesReconciler) view(ctx context.Context, pool types.NamespacedName) (apiView, error) {
	cctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	ws, err := r.api.ListWorkers(cctx, &atev1.ListWorkersRequest{})
	r.metrics.observe("ListWorkers", err)
	if err != nil {
		return apiView{}, fmt.Errorf("ListWorkers: %w", err)
	}
	ns, err := r.api.ListNodes(cctx, &atev1.ListNodesRequest{})
	r.metrics.observe("ListNodes", err)
	if err != nil {
		return apiView{}, fmt.Errorf("ListNodes: %w", err)
	}
	v := apiView{workers: []*atev1.Worker{}, ready: map[string]bool{}}
	for _, w := range ws.GetWorkers() {
		if w.GetLabels()[atek8s.PoolLabel] == pool.Name && w.GetLabels()[atek8s.NamespaceLabel] == pool.Namespace {
			v.workers = append(v.workers, w)
		}
	}
	for _, n := range ns.GetNodes() {
		v.ready[n.GetName()] = n.PhaseOrName() == atev1.Node_READY
	}
	return v, nil
}

// drain asks the API server to drain a terminating Pod's node. Repeated
// on every pass until the Pod is gone: idempotent, and it catches a
// node that re-registered, or a replica that missed the first call. An
// unknown node (NOT_FOUND: it never registered, or is removed) is done.
func (r *nodesReconciler) drain(ctx context.Context, p *corev1.Pod) error {
	cctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	_, err := r.api.DrainNode(cctx, &atev1.DrainNodeRequest{Name: p.Name, Reason: fmt.Sprintf("pod %s/%s terminating", p.Namespace, p.Name)})
	r.metrics.observe("DrainNode", err)
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("DrainNode %s: %w", p.Name, err)
	}
	return nil
}

// removeGone removes from the API server every node of the pool whose
// Pod no longer exists: those seen deleted, and those whose workers
// carry the pool's labels. The cache may lag, so a Pod missing from it
// is looked up live before its node is removed.
func (r *nodesReconciler) removeGone(ctx context.Context, pool types.NamespacedName, v apiView, pods map[string]*corev1.Pod) error {
	candidates := map[string]bool{}
	for _, n := range r.deleted.list(pool) {
		candidates[n] = true
	}
	for _, w := range v.workers {
		candidates[w.GetNode()] = true
	}
	var errs []error
	for name := range candidates {
		if pods[name] != nil {
			continue
		}
		err := r.live.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: name}, &corev1.Pod{})
		if err == nil {
			continue // created since the cache was read: not gone
		}
		if !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("get Pod %s: %w", name, err))
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
		_, err = r.api.RemoveNode(cctx, &atev1.RemoveNodeRequest{Name: name, Reason: fmt.Sprintf("pod %s/%s deleted", pool.Namespace, name)})
		cancel()
		r.metrics.observe("RemoveNode", err)
		if err != nil {
			errs = append(errs, fmt.Errorf("RemoveNode %s: %w", name, err))
			continue
		}
		r.log.Info("node of a deleted worker Pod removed from the API server", "pool", pool, "node", name)
		r.deleted.done(pool, name)
	}
	return errors.Join(errs...)
}

// setDeletionCosts sets each live Pod's deletion cost to the number of
// its node's workers an actor holds, so a scale-down removes free Pods
// first. Patched only on change.
func (r *nodesReconciler) setDeletionCosts(ctx context.Context, v apiView, pods []corev1.Pod) error {
	held := map[string]int{}
	for _, w := range v.workers {
		if w.GetActor() != "" {
			held[w.GetNode()]++
		}
	}
	var errs []error
	for i := range pods {
		p := &pods[i]
		want := strconv.Itoa(held[p.Name])
		if !p.DeletionTimestamp.IsZero() || p.Annotations[atek8s.PodDeletionCostAnnotation] == want {
			continue
		}
		before := p.DeepCopy()
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[atek8s.PodDeletionCostAnnotation] = want
		if err := r.client.Patch(ctx, p, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("set deletion cost of Pod %s: %w", p.Name, err))
		}
	}
	return errors.Join(errs...)
}

// writeStatus applies readyReplicas, readyWorkers (kept as they were
// when the API server did not answer) and NodesSynced. A deleted pool
// has no status to write.
func (r *nodesReconciler) writeStatus(ctx context.Context, req reconcile.Request, readyReplicas int64, v apiView, pods map[string]*corev1.Pod, callErr error) error {
	var pool atek8s.WorkerPool
	if err := r.live.Get(ctx, req.NamespacedName, &pool); err != nil {
		return client.IgnoreNotFound(err)
	}
	readyWorkers := int64(pool.Status.ReadyWorkers)
	if v.ready != nil {
		readyWorkers = 0
		for _, w := range v.workers {
			if p := pods[w.GetNode()]; p != nil && p.DeletionTimestamp.IsZero() && v.ready[w.GetNode()] {
				readyWorkers++
			}
		}
	}
	cond := metav1.Condition{Type: atek8s.ConditionNodesSynced, Status: metav1.ConditionTrue, Reason: ReasonSynced,
		Message: "worker Pods and the API server's nodes agree", ObservedGeneration: pool.Generation}
	if callErr != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonAPIServerUnavailable, callErr.Error()
	}
	conds := append([]metav1.Condition(nil), pool.Status.Conditions...)
	meta.SetStatusCondition(&conds, cond)
	if int64(pool.Status.ReadyReplicas) == readyReplicas && int64(pool.Status.ReadyWorkers) == readyWorkers &&
		conditionsEqual(pool.Status.Conditions, conds) {
		return nil
	}
	err := applyStatus(ctx, r.client, &pool, nodesFieldManager, map[string]any{
		"readyReplicas": readyReplicas,
		"readyWorkers":  readyWorkers,
		"conditions":    conditionsFor(conds, atek8s.ConditionNodesSynced),
	})
	return client.IgnoreNotFound(err)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// unreachable reports whether err says the API server could not be
// reached or did not answer in time (not that it refused the call).
func unreachable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}
