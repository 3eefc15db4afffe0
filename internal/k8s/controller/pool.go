package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// degradedRetry is how soon a Degraded pool is reconciled again without
// an event, so that a permission granted or a SandboxConfig readable
// again is noticed.
const degradedRetry = 30 * time.Second

// poolReconciler is the WorkerPool → Deployment path. It reads its pool
// and Deployment from the cache its own watches fill, and SandboxConfigs
// live (client.Reader, uncached) so that a SandboxConfig that cannot be
// read — forbidden, the API server overloaded — is one failed call it
// handles (keep the Deployment's current runtime, mark Degraded), never
// a watch this path waits on.
type poolReconciler struct {
	client   client.Client
	live     client.Reader
	settings WorkerSettings
	log      *slog.Logger
	// events records a pool's changes of Degraded and its Deployment's
	// creation as events.k8s.io Events (kubectl describe shows them);
	// nil records none.
	events events.EventRecorder
}

// Reconcile applies the pool's Deployment and writes the pool's
// status fields of this path (observedGeneration, replicas, selector,
// Ready, Degraded). A deleted pool is left alone: its Deployment is the
// garbage collector's (owner reference), and is never recreated.
func (r *poolReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pool atek8s.WorkerPool
	if err := r.client.Get(ctx, req.NamespacedName, &pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	var current *appsv1.Deployment
	var d appsv1.Deployment
	switch err := r.client.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: DeploymentName(pool.Name)}, &d); {
	case err == nil:
		current = &d
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("get Deployment: %w", err)
	}

	if err := r.checkPermitted(ctx, &pool); err != nil {
		return r.refuse(ctx, &pool, current, err)
	}
	degraded := metav1.Condition{Type: atek8s.ConditionDegraded, Status: metav1.ConditionFalse, Reason: ReasonReconciled,
		Message: "Deployment " + DeploymentName(pool.Name) + " applied"}
	runsc, apply, cause := r.runtimeArgs(ctx, &pool, current)
	if cause != nil {
		degraded.Status, degraded.Message = metav1.ConditionTrue, cause.Error()
		degraded.Reason = reasonFor(cause)
	}
	var applyErr error
	if apply {
		// An apply creates what is missing: make sure the pool is not
		// one just deleted that the cache still holds (the two kinds'
		// watches are not ordered) or that was deleted during this pass,
		// else its Deployment would come back. What slips between this
		// read and the apply has a dead owner, which the garbage
		// collector deletes.
		var live atek8s.WorkerPool
		if err := r.live.Get(ctx, req.NamespacedName, &live); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if live.UID != pool.UID || !live.DeletionTimestamp.IsZero() {
			return reconcile.Result{}, nil
		}
		// The CA first: worker Pods cannot start without it.
		if cm := workerCAConfigMap(&pool, r.settings); cm != nil {
			applyErr = applyObject(ctx, r.client, cm)
		}
		if applyErr == nil {
			applyErr = applyObject(ctx, r.client, workerDeployment(&pool, r.settings, runsc))
		}
		if applyErr != nil {
			degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, ReasonApplyFailed, applyErr.Error()
		}
	} else {
		r.log.Warn("pool's Deployment left as it is", "pool", req.NamespacedName, "reason", degraded.Reason, "err", cause)
	}
	r.record(&pool, current, degraded)
	statusErr := r.writeStatus(ctx, &pool, current, degraded)
	if err := errors.Join(applyErr, statusErr); err != nil {
		return reconcile.Result{}, err
	}
	if degraded.Status == metav1.ConditionTrue {
		return reconcile.Result{RequeueAfter: degradedRetry}, nil
	}
	return reconcile.Result{}, nil
}

// runtimeArgs returns the --runsc-asset flags for pool, whether to apply
// the Deployment at all, and why the pool is degraded (nil: it is not).
// SandboxConfigs unreadable: the current Deployment's flags, applied
// (replicas and the rest still follow the pool). The named config
// missing or two defaults: no apply, since either would change the
// workers' runtime to one nobody chose.
func (r *poolReconciler) runtimeArgs(ctx context.Context, pool *atek8s.WorkerPool, current *appsv1.Deployment) ([]string, bool, error) {
	var list atek8s.SandboxConfigList
	if err := r.live.List(ctx, &list); err != nil {
		return currentRunscArgs(current), true, &unavailableError{err: err}
	}
	sc, err := resolveSandboxConfig(pool, list.Items)
	if err != nil {
		return nil, false, err
	}
	if sc == nil {
		return nil, true, nil
	}
	return runscAssetArgs(sc), true, nil
}

// unavailableError: SandboxConfigs could not be listed.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string {
	return "SandboxConfigs cannot be read (the Deployment keeps its current runtime): " + e.err.Error()
}
func (e *unavailableError) Unwrap() error { return e.err }

// reasonFor is the Degraded reason of a runtimeArgs cause.
func reasonFor(err error) string {
	var conflict *conflictError
	var unavailable *unavailableError
	switch {
	case errors.As(err, &unavailable):
		return ReasonSandboxConfigUnavailable
	case errors.As(err, &conflict):
		return ReasonSandboxConfigConflict
	case errors.Is(err, errSandboxConfigNotFound):
		return ReasonSandboxConfigNotFound
	default:
		return ReasonApplyFailed
	}
}

// writeStatus applies this path's status fields. Ready comes from the
// Deployment as last observed: ready Pods are registered nodes (their
// readiness probe is ate node's /readyz).
func (r *poolReconciler) writeStatus(ctx context.Context, pool *atek8s.WorkerPool, d *appsv1.Deployment, degraded metav1.Condition) error {
	want := ptr.Deref(pool.Spec.Replicas, 1)
	var replicas, ready int32
	if d != nil {
		replicas, ready = d.Status.Replicas, d.Status.ReadyReplicas
	}
	readyCond := metav1.Condition{Type: atek8s.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonReplicasReady,
		Message: fmt.Sprintf("%d/%d worker Pods ready", ready, want)}
	if ready < want || replicas != want || degraded.Status == metav1.ConditionTrue {
		readyCond.Status, readyCond.Reason = metav1.ConditionFalse, ReasonReplicasNotReady
	}
	conds := append([]metav1.Condition(nil), pool.Status.Conditions...)
	readyCond.ObservedGeneration, degraded.ObservedGeneration = pool.Generation, pool.Generation
	meta.SetStatusCondition(&conds, readyCond)
	meta.SetStatusCondition(&conds, degraded)
	s := pool.Status
	if s.ObservedGeneration == pool.Generation && s.Replicas == replicas && s.Selector == poolSelector(pool.Name) &&
		conditionsEqual(s.Conditions, conds) {
		return nil
	}
	return applyStatus(ctx, r.client, pool, FieldManager, map[string]any{
		"observedGeneration": pool.Generation,
		"replicas":           int64(replicas),
		"selector":           poolSelector(pool.Name),
		"conditions":         conditionsFor(conds, atek8s.ConditionReady, atek8s.ConditionDegraded),
	})
}

// record emits an Event when the pool's Degraded condition changes (a
// Warning naming the reason, or Normal once it recovers) and when its
// Deployment is first created: once per change, not per reconcile.
func (r *poolReconciler) record(pool *atek8s.WorkerPool, current *appsv1.Deployment, degraded metav1.Condition) {
	if r.events == nil {
		return
	}
	prev := meta.FindStatusCondition(pool.Status.Conditions, atek8s.ConditionDegraded)
	switch {
	case degraded.Status == metav1.ConditionTrue && (prev == nil || prev.Status != metav1.ConditionTrue || prev.Reason != degraded.Reason):
		r.events.Eventf(pool, nil, corev1.EventTypeWarning, degraded.Reason, "Reconcile", "%s", degraded.Message)
	case degraded.Status == metav1.ConditionFalse && prev != nil && prev.Status == metav1.ConditionTrue:
		r.events.Eventf(pool, nil, corev1.EventTypeNormal, ReasonReconciled, "Reconcile", "%s", degraded.Message)
	}
	if current == nil && degraded.Reason != ReasonApplyFailed && degraded.Status == metav1.ConditionFalse {
		r.events.Eventf(pool, nil, corev1.EventTypeNormal, "DeploymentCreated", "Apply", "Deployment %s created", DeploymentName(pool.Name))
	}
}
