package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// Worker Pods run privileged, as root on the machine, with whatever
// image, ServiceAccount and tolerations their WorkerPool names. So the
// controller runs a pool only where the operator said it may: in a
// namespace labelled PoolNamespaceLabel=PoolNamespaceAllowed, and only
// with the workers' default image or one of --worker-allowed-image.
// Whoever may write WorkerPools in another namespace gets no Pod.
const (
	PoolNamespaceLabel   = "ate.substrate.dev/worker-pools"
	PoolNamespaceAllowed = "allowed"
	// ReasonNotPermitted is the Degraded reason of a pool the controller
	// will not run.
	ReasonNotPermitted = "NotPermitted"
)

// errNotPermitted marks a pool outside what the operator allows.
var errNotPermitted = errors.New("not permitted")

// permitted returns nil when a pool in namespace ns (nil: unreadable,
// which refuses too) may run, else an error wrapping errNotPermitted
// saying what to change.
func (w WorkerSettings) permitted(ns *corev1.Namespace, pool *atek8s.WorkerPool) error {
	if ns == nil || ns.Labels[PoolNamespaceLabel] != PoolNamespaceAllowed {
		return fmt.Errorf("%w: namespace %s is not labelled %s=%s; worker Pods run privileged, so an operator opts a namespace in (kubectl label namespace %s %s=%s)",
			errNotPermitted, pool.Namespace, PoolNamespaceLabel, PoolNamespaceAllowed, pool.Namespace, PoolNamespaceLabel, PoolNamespaceAllowed)
	}
	if img := pool.Spec.Image; img != "" && img != w.Image && !slices.Contains(w.AllowedImages, img) {
		allowed := append([]string{w.Image}, w.AllowedImages...)
		return fmt.Errorf("%w: image %q is not one the controller runs (allowed: %s; the operator's --worker-allowed-image)",
			errNotPermitted, img, strings.Join(allowed, ", "))
	}
	return nil
}

// checkPermitted reads the pool's namespace (live: one get per
// reconcile, no cache of every namespace) and applies permitted.
func (r *poolReconciler) checkPermitted(ctx context.Context, pool *atek8s.WorkerPool) error {
	var ns corev1.Namespace
	if err := r.live.Get(ctx, client.ObjectKey{Name: pool.Namespace}, &ns); err != nil {
		return fmt.Errorf("%w: namespace %s cannot be read (%w)", errNotPermitted, pool.Namespace, err)
	}
	return r.settings.permitted(&ns, pool)
}

// refuse leaves a pool that may not run without Pods: its Deployment,
// if an earlier pass made one (the namespace label since removed, the
// image since dropped from the list), is scaled to zero; the pool is
// Degraded with the reason, and looked at again after degradedRetry.
func (r *poolReconciler) refuse(ctx context.Context, pool *atek8s.WorkerPool, current *appsv1.Deployment, why error) (reconcile.Result, error) {
	r.log.Warn("pool not run", "pool", client.ObjectKeyFromObject(pool), "err", why)
	degraded := metav1.Condition{Type: atek8s.ConditionDegraded, Status: metav1.ConditionTrue, Reason: ReasonNotPermitted, Message: why.Error()}
	var scaleErr error
	if current != nil && ptr.Deref(current.Spec.Replicas, 1) != 0 {
		patch := client.MergeFrom(current.DeepCopy())
		current.Spec.Replicas = ptr.To[int32](0)
		if err := r.client.Patch(ctx, current, patch, client.FieldOwner(FieldManager)); err != nil {
			scaleErr = fmt.Errorf("scale Deployment %s to zero: %w", current.Name, err)
		}
	}
	r.record(pool, current, degraded)
	if err := errors.Join(scaleErr, r.writeStatus(ctx, pool, current, degraded)); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: degradedRetry}, nil
}
