package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// applyObject server-side applies obj (a typed object with apiVersion
// and kind set) as FieldManager, forcing ownership: the controller's
// fields are the controller's, so a `kubectl scale` of a pool's
// Deployment is undone. The object's status and creation timestamps are
// not sent: they are not ours to apply.
func applyObject(ctx context.Context, c client.Client, obj runtime.Object) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	ac := client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u})
	if err := c.Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	return nil
}

// applyStatus server-side applies status (only the fields given, as
// JSON values) to obj's status subresource as manager. Two paths write
// a WorkerPool's status, each under its own manager and with only its
// own fields, so neither overwrites the other's. Errors: the API
// server's (NotFound for a deleted object).
func applyStatus(ctx context.Context, c client.Client, obj client.Object, manager string, status map[string]any) error {
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return fmt.Errorf("apply status: %w", err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetGroupVersionKind(gvk)
	u.SetName(obj.GetName())
	u.SetNamespace(obj.GetNamespace())
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(manager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply status of %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// conditionsFor renders the conditions of conds whose type is one of
// types, as JSON values for applyStatus.
func conditionsFor(conds []metav1.Condition, types ...string) []any {
	var out []any
	for _, c := range conds {
		if !slices.Contains(types, c.Type) {
			continue
		}
		out = append(out, map[string]any{
			"type": c.Type, "status": string(c.Status), "reason": c.Reason, "message": c.Message,
			"observedGeneration": c.ObservedGeneration,
			"lastTransitionTime": c.LastTransitionTime.UTC().Format(time.RFC3339),
		})
	}
	return out
}

// conditionsEqual: a and b hold the same conditions (order aside).
func conditionsEqual(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for _, c := range a {
		i := slices.IndexFunc(b, func(d metav1.Condition) bool { return d.Type == c.Type })
		if i < 0 {
			return false
		}
		d := b[i]
		if c.Status != d.Status || c.Reason != d.Reason || c.Message != d.Message ||
			c.ObservedGeneration != d.ObservedGeneration || !c.LastTransitionTime.Equal(&d.LastTransitionTime) {
			return false
		}
	}
	return true
}
