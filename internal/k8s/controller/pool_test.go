package controller

import (
	"context"
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"substrate.dev/ate/internal/testwait"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

func newPool(ns, name string, replicas int32) *atek8s.WorkerPool {
	return &atek8s.WorkerPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       atek8s.WorkerPoolSpec{Replicas: ptr.To(replicas), WorkersPerPod: 2, Labels: map[string]atek8s.LabelValue{"tier": "a"}},
	}
}

func newSandboxConfig(name, class string, def bool, digit byte) *atek8s.SandboxConfig {
	return &atek8s.SandboxConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: atek8s.SandboxConfigSpec{SandboxClass: class, Default: def, Assets: []atek8s.RuntimeAsset{
			{Name: "runsc", Architecture: "amd64", URL: "https://example.com/" + name, SHA256: sha(digit)},
		}},
	}
}

// create creates obj with the admin client and deletes it when t ends.
func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := testEnv.Client.Create(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testEnv.Client.Delete(context.Background(), obj) })
}

// deployment returns pool's Deployment, nil if there is none.
func deployment(t *testing.T, ns, pool string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	err := testEnv.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: DeploymentName(pool)}, &d)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &d
}

func getPool(t *testing.T, ns, name string) *atek8s.WorkerPool {
	t.Helper()
	var p atek8s.WorkerPool
	if err := testEnv.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

func replicasOf(d *appsv1.Deployment) int32 {
	if d == nil {
		return -1
	}
	return ptr.Deref(d.Spec.Replicas, 1)
}

// scaleDeployment sets the Deployment's replicas as a person would
// (kubectl scale: the scale subresource).
func scaleDeployment(t *testing.T, ns, pool string, n int32) {
	t.Helper()
	s, err := testEnv.Clientset.AppsV1().Deployments(ns).GetScale(t.Context(), DeploymentName(pool), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Replicas = n
	if _, err := testEnv.Clientset.AppsV1().Deployments(ns).UpdateScale(t.Context(), DeploymentName(pool), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func condition(p *atek8s.WorkerPool, typ string) *metav1.Condition {
	return meta.FindStatusCondition(p.Status.Conditions, typ)
}

// TestPoolDeployment: a pool becomes its Deployment; spec.replicas and
// the /scale subresource scale it; a deleted pool's Deployment is owned
// by it and not recreated.
func TestPoolDeployment(t *testing.T) {
	ns := namespace(t)
	class := "cls-" + ns // a class of this test's own: SandboxConfigs are cluster-wide
	create(t, newSandboxConfig("sc-"+ns, class, true, 'c'))
	startController(t, ns, nil, Config{API: startFake(t, &fakeControl{}), Workers: WorkerSettings{Snapshots: "s3://b"}})

	pool := newPool(ns, "web", 2)
	pool.Spec.SandboxClass = class
	create(t, pool)
	testwait.Until(t, "Deployment with replicas 2", func() bool { return replicasOf(deployment(t, ns, "web")) == 2 })
	d := deployment(t, ns, "web")
	args := d.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--runsc-asset=amd64="+sha('c')+"@https://example.com/sc-"+ns) ||
		!slices.Contains(args, "--labels=ate.substrate.dev/pool=web,ate.substrate.dev/namespace="+ns+",tier=a") ||
		!slices.Contains(args, "--sandbox-class="+class) {
		t.Errorf("args %q", args)
	}
	p := getPool(t, ns, "web")
	if len(d.OwnerReferences) != 1 || d.OwnerReferences[0].UID != p.UID || !ptr.Deref(d.OwnerReferences[0].Controller, false) {
		t.Errorf("owner references %+v", d.OwnerReferences)
	}
	testwait.Until(t, "status.selector and observedGeneration", func() bool {
		p := getPool(t, ns, "web")
		return p.Status.Selector == poolSelector("web") && p.Status.ObservedGeneration == p.Generation
	})

	// Through spec.replicas.
	before := p.DeepCopy()
	p.Spec.Replicas = ptr.To[int32](3)
	if err := testEnv.Client.Patch(t.Context(), p, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "Deployment with replicas 3", func() bool { return replicasOf(deployment(t, ns, "web")) == 3 })

	// Through the pool's /scale subresource, as an HPA or kubectl scale.
	dyn, err := dynamic.NewForConfig(testEnv.Config)
	if err != nil {
		t.Fatal(err)
	}
	pools := dyn.Resource(workerPoolsGVR).Namespace(ns)
	if _, err := pools.Patch(t.Context(), "web", types.MergePatchType, []byte(`{"spec":{"replicas":5}}`), metav1.PatchOptions{}, "scale"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "Deployment with replicas 5", func() bool { return replicasOf(deployment(t, ns, "web")) == 5 })
	scale, err := pools.Get(t.Context(), "web", metav1.GetOptions{}, "scale")
	if err != nil {
		t.Fatal(err)
	}
	if sel, _, _ := unstructuredString(scale.Object, "status", "selector"); sel != poolSelector("web") {
		t.Errorf("scale status.selector %q, want %q", sel, poolSelector("web"))
	}

	// Deleted: no garbage collector runs here, so delete the Deployment
	// too, then prove the controller moved on (another pool's Deployment
	// appears) without recreating it.
	if err := testEnv.Client.Delete(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if err := testEnv.Client.Delete(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	later := newPool(ns, "later", 1)
	later.Spec.SandboxClass = class
	create(t, later)
	testwait.Until(t, "the later pool's Deployment", func() bool { return deployment(t, ns, "later") != nil })
	if d2 := deployment(t, ns, "web"); d2 != nil {
		t.Errorf("the deleted pool's Deployment was recreated: uid %s (was %s), deletion %v, finalizers %v, managed %v", d2.UID, d.UID, d2.DeletionTimestamp, d2.Finalizers, d2.ManagedFields)
	}
}

// TestSandboxConfigResolution: two defaults of a class conflict (both
// Accepted=False Conflict, the pool Degraded naming them, its Deployment
// left as it was); a named config that is missing degrades the pool.
func TestSandboxConfigResolution(t *testing.T) {
	ns := namespace(t)
	class := "cls-" + ns
	create(t, newSandboxConfig("one-"+ns, class, true, 'a'))
	startController(t, ns, nil, Config{API: startFake(t, &fakeControl{})})
	pool := newPool(ns, "p", 1)
	pool.Spec.SandboxClass = class
	create(t, pool)
	testwait.Until(t, "Deployment with config one", func() bool {
		d := deployment(t, ns, "p")
		return d != nil && slices.Contains(currentRunscArgs(d), "--runsc-asset=amd64="+sha('a')+"@https://example.com/one-"+ns)
	})

	create(t, newSandboxConfig("two-"+ns, class, true, 'b'))
	for _, name := range []string{"one-" + ns, "two-" + ns} {
		testwait.Until(t, name+" Accepted=False Conflict", func() bool {
			var sc atek8s.SandboxConfig
			if err := testEnv.Client.Get(t.Context(), types.NamespacedName{Name: name}, &sc); err != nil {
				t.Fatal(err)
			}
			c := meta.FindStatusCondition(sc.Status.Conditions, ConditionAccepted)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonConflict
		})
	}
	testwait.Until(t, "pool Degraded naming both", func() bool {
		c := condition(getPool(t, ns, "p"), atek8s.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonSandboxConfigConflict &&
			strings.Contains(c.Message, "one-"+ns) && strings.Contains(c.Message, "two-"+ns)
	})
	if got := currentRunscArgs(deployment(t, ns, "p")); len(got) != 1 || !strings.Contains(got[0], sha('a')) {
		t.Errorf("Deployment's runtime changed during the conflict: %q", got)
	}

	named := newPool(ns, "named", 1)
	named.Spec.SandboxConfigName = "missing-" + ns
	create(t, named)
	testwait.Until(t, "pool Degraded SandboxConfigNotFound", func() bool {
		c := condition(getPool(t, ns, "named"), atek8s.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonSandboxConfigNotFound
	})
	if deployment(t, ns, "named") != nil {
		t.Error("a Deployment was made for a pool whose SandboxConfig is missing")
	}
	// kubectl describe shows why: one Warning Event on the pool, and a
	// Normal one for the first pool's Deployment.
	for _, want := range []struct{ pool, typ, reason string }{
		{"named", corev1.EventTypeWarning, ReasonSandboxConfigNotFound},
		{"p", corev1.EventTypeNormal, "DeploymentCreated"},
		{"p", corev1.EventTypeWarning, ReasonSandboxConfigConflict},
	} {
		testwait.Until(t, fmt.Sprintf("a %s Event %s on pool %s", want.typ, want.reason, want.pool), func() bool {
			evs, err := testEnv.Clientset.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs.Items {
				if e.Regarding.Name == want.pool && e.Regarding.Kind == "WorkerPool" && e.Type == want.typ && e.Reason == want.reason {
					return true
				}
			}
			return false
		})
	}
}
