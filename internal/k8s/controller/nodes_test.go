package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/testwait"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// workerPod creates a worker Pod of pool as the ReplicaSet would, bound
// to a node (so a graceful delete leaves it Terminating: no kubelet
// finishes it), ready or not.
func workerPod(t *testing.T, ns, pool, name string, ready bool) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			atek8s.PoolLabel: pool, nameLabel: workerName, managedByLabel: FieldManager,
		}},
		Spec: corev1.PodSpec{NodeName: "kube-node-1", Containers: []corev1.Container{{Name: "node", Image: "ate:test"}}},
	}
	if err := testEnv.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	if err := testEnv.Client.Status().Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testEnv.Client.Delete(t.Context(), p, client.GracePeriodSeconds(0))
	})
	return p
}

// workersOf returns n workers of node in pool ns/pool, the first held
// of them held by an actor.
func workersOf(ns, pool, node string, n, held int) []*atev1.Worker {
	var ws []*atev1.Worker
	for i := range n {
		w := &atev1.Worker{Name: fmt.Sprintf("%s-w%d", node, i), Node: node, Phase: atev1.Worker_FREE,
			Labels: map[string]string{atek8s.PoolLabel: pool, atek8s.NamespaceLabel: ns}}
		if i < held {
			w.Phase, w.Actor = atev1.Worker_CLAIMED, fmt.Sprintf("default/actor-%s-%d", node, i)
		}
		ws = append(ws, w)
	}
	return ws
}

func deletionCost(t *testing.T, ns, name string) string {
	t.Helper()
	var p corev1.Pod
	if err := testEnv.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return p.Annotations[atek8s.PodDeletionCostAnnotation]
}

// TestWorkerPods: ready Pods count in readyReplicas and their READY
// nodes' workers in readyWorkers; deletion costs follow what each node
// hosts; a terminating Pod's node is drained, a deleted one's removed,
// as is a node of the pool with no Pod; with the API server down the
// pool reports it and the Deployment path still works.
func TestWorkerPods(t *testing.T) {
	ns := namespace(t)
	fake := &fakeControl{}
	ctl := startController(t, ns, nil, Config{API: startFake(t, fake)})
	create(t, newPool(ns, "w", 2))
	workerPod(t, ns, "w", "busy", true)
	free := workerPod(t, ns, "w", "free", true)
	workerPod(t, ns, "w", "starting", false)
	// Nodes register once their Pods run: the tables come after the Pods.
	// Other namespace, same pool name: never touched.
	other := workersOf("elsewhere", "w", "stray-other-ns", 1, 0)
	fake.set(slices.Concat(workersOf(ns, "w", "busy", 2, 1), workersOf(ns, "w", "free", 2, 0), workersOf(ns, "w", "gone", 1, 0), other),
		[]*atev1.Node{{Name: "busy", Phase: atev1.Node_READY}, {Name: "free", Phase: atev1.Node_READY}, {Name: "gone", Phase: atev1.Node_READY}, {Name: "stray-other-ns", Phase: atev1.Node_READY}})

	testwait.Until(t, "readyReplicas 2, readyWorkers 4", func() bool {
		s := getPool(t, ns, "w").Status
		return s.ReadyReplicas == 2 && s.ReadyWorkers == 4
	})
	testwait.Until(t, "deletion costs busy 1, free 0", func() bool {
		return deletionCost(t, ns, "busy") == "1" && deletionCost(t, ns, "free") == "0" && deletionCost(t, ns, "starting") == "0"
	})
	testwait.Until(t, "node gone (no Pod) removed", func() bool {
		_, removed := fake.calls()
		return slices.Contains(removed, "gone: pod "+ns+"/gone deleted")
	})

	// Terminating: drained, and again on every pass until it is gone.
	if err := testEnv.Client.Delete(t.Context(), free); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "DrainNode(free) twice", func() bool {
		drained, _ := fake.calls()
		n := 0
		for _, d := range drained {
			if d == "free: pod "+ns+"/free terminating" {
				n++
			}
		}
		return n >= 2
	})
	testwait.Until(t, "readyReplicas 1 while free terminates", func() bool { return getPool(t, ns, "w").Status.ReadyReplicas == 1 })

	// Deleted.
	if err := testEnv.Client.Delete(t.Context(), free, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	testwait.Until(t, "RemoveNode(free)", func() bool {
		_, removed := fake.calls()
		return slices.Contains(removed, "free: pod "+ns+"/free deleted")
	})
	testwait.Until(t, "readyWorkers 2", func() bool { return getPool(t, ns, "w").Status.ReadyWorkers == 2 })

	_, removed := fake.calls()
	for _, r := range removed {
		if strings.HasPrefix(r, "busy:") || strings.HasPrefix(r, "stray-other-ns:") || strings.HasPrefix(r, "starting:") {
			t.Errorf("removed a node it must not: %s", r)
		}
	}

	// The API server down: the nodes path says so; the Deployment path
	// is unaffected.
	fake.setUnavailable(true)
	testwait.Until(t, "NodesSynced=False APIServerUnavailable", func() bool {
		c := condition(getPool(t, ns, "w"), atek8s.ConditionNodesSynced)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonAPIServerUnavailable
	})
	testwait.Until(t, "Deployment", func() bool { return deployment(t, ns, "w") != nil })
	scaleDeployment(t, ns, "w", 0)
	testwait.Until(t, "Deployment put back to 2 while the API server is down", func() bool { return replicasOf(deployment(t, ns, "w")) == 2 })
	testwait.Until(t, "Unavailable calls counted", func() bool {
		_, m := httpGet(t, "http://"+ctl.c.ManagementAddr()+"/metrics")
		return strings.Contains(m, `ate_controller_api_calls_total{call="ListWorkers",code="Unavailable"}`) &&
			strings.Contains(m, `controller_runtime_reconcile_total{controller="workerpool",result="success"}`)
	})
	fake.setUnavailable(false)
	testwait.Until(t, "NodesSynced=True again", func() bool {
		c := condition(getPool(t, ns, "w"), atek8s.ConditionNodesSynced)
		return c != nil && c.Status == metav1.ConditionTrue
	})
}
