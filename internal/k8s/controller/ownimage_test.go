package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Without --worker-image the worker image is the controller's own, read
// from its Pod; outside a Pod the flag is required.
func TestOwnImage(t *testing.T) {
	ns := namespace(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ate-controller-0", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "sidecar", Image: "proxy:1"},
			{Name: ownContainer, Image: "registry.example/ate:v9"},
		}}}
	if err := testEnv.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAMESPACE", ns)
	t.Setenv("POD_NAME", pod.Name)
	if got, err := ownImage(testEnv.Config); err != nil || got != "registry.example/ate:v9" {
		t.Fatalf("ownImage = %q, %v; want the controller container's image", got, err)
	}
	t.Setenv("POD_NAME", "")
	if _, err := ownImage(testEnv.Config); err == nil || !strings.Contains(err.Error(), "--worker-image") {
		t.Fatalf("ownImage outside a Pod = %v; want an error naming --worker-image", err)
	}
}
