package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"substrate.dev/ate/internal/nodeapi"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// ConditionAccepted is a SandboxConfig's condition: False with reason
// Conflict while another SandboxConfig is the default of its class.
const ConditionAccepted = "Accepted"

// Reasons of pools' and SandboxConfigs' conditions (CamelCase, per the
// Kubernetes API conventions).
const (
	ReasonConflict                 = "Conflict"
	ReasonAccepted                 = "Accepted"
	ReasonSandboxConfigNotFound    = "SandboxConfigNotFound"
	ReasonSandboxConfigConflict    = "SandboxConfigConflict"
	ReasonSandboxConfigUnavailable = "SandboxConfigUnavailable"
	ReasonApplyFailed              = "ApplyFailed"
	ReasonReconciled               = "Reconciled"
	ReasonReplicasReady            = "ReplicasReady"
	ReasonReplicasNotReady         = "ReplicasNotReady"
	ReasonSynced                   = "Synced"
	ReasonAPIServerUnavailable     = "APIServerUnavailable"
)

// errSandboxConfigNotFound: the pool names a SandboxConfig that does
// not exist.
var errSandboxConfigNotFound = errors.New("sandbox config not found")

// conflictError: several SandboxConfigs claim to be the default of a
// class, so none is.
type conflictError struct {
	class nodeapi.Class
	names []string
}

func (e *conflictError) Error() string {
	return fmt.Sprintf("SandboxConfigs %s all claim default: true for sandbox class %s; none is used", strings.Join(e.names, ", "), e.class)
}

// defaultsOf returns the names of configs that claim default for class,
// sorted.
func defaultsOf(configs []atek8s.SandboxConfig, class nodeapi.Class) []string {
	var names []string
	for _, c := range configs {
		if c.Spec.Default && nodeapi.ClassOf(c.Spec.SandboxClass) == class {
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	return names
}

// resolveSandboxConfig picks pool's SandboxConfig from configs: the one
// spec.sandboxConfigName names, else the one default of the pool's
// class. Nil and no error: none named and no default (the workers use
// the image's runsc). Errors: errSandboxConfigNotFound, *conflictError.
func resolveSandboxConfig(pool *atek8s.WorkerPool, configs []atek8s.SandboxConfig) (*atek8s.SandboxConfig, error) {
	if name := pool.Spec.SandboxConfigName; name != "" {
		for i := range configs {
			if configs[i].Name == name {
				return &configs[i], nil
			}
		}
		return nil, fmt.Errorf("SandboxConfig %s: %w", name, errSandboxConfigNotFound)
	}
	class := nodeapi.ClassOf(pool.Spec.SandboxClass)
	switch d := defaultsOf(configs, class); len(d) {
	case 0:
		return nil, nil
	case 1:
		i := slices.IndexFunc(configs, func(c atek8s.SandboxConfig) bool { return c.Name == d[0] })
		return &configs[i], nil
	default:
		return nil, &conflictError{class: class, names: d}
	}
}

// sandboxConfigReconciler writes SandboxConfigs' Accepted condition. Its
// one key (allConfigs) recomputes every config, since one config's
// change moves another's conflict. After a pass it nudges the pool path
// (poolNudge) so pools pick up new assets; that is a notification, never
// a precondition of either path.
type sandboxConfigReconciler struct {
	client    client.Client
	poolNudge chan<- event.GenericEvent
	log       *slog.Logger
}

// allConfigs is the sandbox config path's single work item.
var allConfigs = reconcile.Request{NamespacedName: types.NamespacedName{Name: "all-sandboxconfigs"}}

// Reconcile recomputes every SandboxConfig's Accepted condition.
func (r *sandboxConfigReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var list atek8s.SandboxConfigList
	if err := r.client.List(ctx, &list); err != nil {
		return reconcile.Result{}, fmt.Errorf("list SandboxConfigs: %w", err)
	}
	var errs []error
	for i := range list.Items {
		sc := &list.Items[i]
		cond := metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue, Reason: ReasonAccepted,
			Message: "assets in use by pools that name this SandboxConfig or, if default, by its class", ObservedGeneration: sc.Generation}
		if sc.Spec.Default {
			if d := defaultsOf(list.Items, nodeapi.ClassOf(sc.Spec.SandboxClass)); len(d) > 1 {
				cond.Status, cond.Reason = metav1.ConditionFalse, ReasonConflict
				cond.Message = (&conflictError{class: nodeapi.ClassOf(sc.Spec.SandboxClass), names: d}).Error()
			}
		}
		conds := append([]metav1.Condition(nil), sc.Status.Conditions...)
		meta.SetStatusCondition(&conds, cond)
		if sc.Status.ObservedGeneration == sc.Generation && conditionsEqual(sc.Status.Conditions, conds) {
			continue
		}
		if err := applyStatus(ctx, r.client, sc, FieldManager, map[string]any{
			"observedGeneration": sc.Generation,
			"conditions":         conditionsFor(conds, ConditionAccepted),
		}); err != nil {
			errs = append(errs, err)
		}
	}
	select {
	case r.poolNudge <- event.GenericEvent{Object: &atek8s.SandboxConfig{}}:
	default: // one nudge pending covers this change too
	}
	return reconcile.Result{}, errors.Join(errs...)
}
