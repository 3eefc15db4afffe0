package k8stest_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"substrate.dev/ate/internal/k8s/k8stest"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// The harness serves the CRDs with their defaults and CEL rules.
func TestStart(t *testing.T) {
	env := k8stest.Start(t)
	ctx := t.Context()
	wp := &atek8s.WorkerPool{ObjectMeta: metav1.ObjectMeta{Name: "ok", Namespace: "default"}}
	if err := env.Client.Create(ctx, wp); err != nil {
		t.Fatal(err)
	}
	if wp.Spec.Replicas == nil || *wp.Spec.Replicas != 1 || wp.Spec.WorkersPerPod != 1 || wp.Spec.SandboxClass != "gvisor" {
		t.Fatalf("defaults not applied: %+v", wp.Spec)
	}
	bad := &atek8s.WorkerPool{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "default"},
		Spec: atek8s.WorkerPoolSpec{Labels: map[string]atek8s.LabelValue{"bad key": "v"}}}
	err := env.Client.Create(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), "label keys must be Kubernetes label keys") {
		t.Fatalf("Create(label key with a space) = %v, want refused by CEL naming the rule", err)
	}
}
