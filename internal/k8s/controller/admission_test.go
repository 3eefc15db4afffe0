package controller

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"substrate.dev/ate/internal/testwait"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

func TestPermitted(t *testing.T) {
	w := WorkerSettings{Image: "ate:default", AllowedImages: []string{"ate:canary"}}
	allowed := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: map[string]string{PoolNamespaceLabel: PoolNamespaceAllowed}}}
	for _, tc := range []struct {
		name  string
		ns    *corev1.Namespace
		image string
		want  string // "" permitted
	}{
		{"default image", allowed, "", ""},
		{"the default named", allowed, "ate:default", ""},
		{"an allowed image", allowed, "ate:canary", ""},
		{"another image", allowed, "attacker/root-shell:1", `image "attacker/root-shell:1" is not one the controller runs (allowed: ate:default, ate:canary`},
		{"namespace not labelled", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, "", "namespace team is not labelled ate.substrate.dev/worker-pools=allowed"},
		{"label with another value", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: map[string]string{PoolNamespaceLabel: "true"}}}, "", "is not labelled"},
		{"namespace unreadable", nil, "", "is not labelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &atek8s.WorkerPool{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p"}, Spec: atek8s.WorkerPoolSpec{Image: tc.image}}
			err := w.permitted(tc.ns, pool)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (!errors.Is(err, errNotPermitted) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("permitted = %v, want errNotPermitted containing %q", err, tc.want)
			}
		})
	}
}

// TestPoolNotPermitted: whoever may write WorkerPools, in a namespace the
// operator did not opt in or naming an image the controller does not
// run, gets no Deployment (so no privileged Pod) and a Degraded pool
// saying why; a pool whose namespace loses the label has its Deployment
// scaled to zero at once (the controller watches namespaces' labels),
// and back when the label returns.
func TestPoolNotPermitted(t *testing.T) {
	plain := namespaceLabelled(t, nil)
	opted := namespace(t)
	fake := startFake(t, &fakeControl{})
	startController(t, plain, nil, Config{API: fake, Workers: WorkerSettings{Snapshots: "s3://b"}})
	startController(t, opted, nil, Config{API: fake, Workers: WorkerSettings{Snapshots: "s3://b", AllowedImages: []string{"ate:canary"}}})

	notOptedIn := newPool(plain, "sneaky", 2)
	create(t, notOptedIn)
	badImage := newPool(opted, "shell", 2)
	badImage.Spec.Image = "attacker/root-shell:1"
	create(t, badImage)
	canary := newPool(opted, "canary", 1)
	canary.Spec.Image = "ate:canary"
	create(t, canary)

	for _, p := range []struct{ ns, name, why string }{
		{plain, "sneaky", "is not labelled " + PoolNamespaceLabel},
		{opted, "shell", `image "attacker/root-shell:1" is not one the controller runs`},
	} {
		testwait.Until(t, p.name+" Degraded NotPermitted", func() bool {
			c := condition(getPool(t, p.ns, p.name), atek8s.ConditionDegraded)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonNotPermitted && strings.Contains(c.Message, p.why)
		})
	}
	// The allowed pool's Deployment shows the controller reconciled
	// after the refused ones were seen.
	testwait.Until(t, "the canary pool's Deployment", func() bool { return deployment(t, opted, "canary") != nil })
	for _, p := range [][2]string{{plain, "sneaky"}, {opted, "shell"}} {
		if d := deployment(t, p[0], p[1]); d != nil {
			t.Errorf("pool %s/%s got a Deployment running %s", p[0], p[1], d.Spec.Template.Spec.Containers[0].Image)
		}
	}

	// The operator withdraws the namespace: its pool's Pods go.
	var ns corev1.Namespace
	if err := testEnv.Client.Get(t.Context(), client.ObjectKey{Name: opted}, &ns); err != nil {
		t.Fatal(err)
	}
	delete(ns.Labels, PoolNamespaceLabel)
	if err := testEnv.Client.Update(t.Context(), &ns); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the canary Deployment scaled to zero", func() bool { return replicasOf(deployment(t, opted, "canary")) == 0 })

	// Opted in again: the pool runs again, with no change to it.
	if err := testEnv.Client.Get(t.Context(), client.ObjectKey{Name: opted}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels[PoolNamespaceLabel] = PoolNamespaceAllowed
	if err := testEnv.Client.Update(t.Context(), &ns); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the canary Deployment scaled back to 1", func() bool { return replicasOf(deployment(t, opted, "canary")) == 1 })
}
