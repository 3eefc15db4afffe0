package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/k8s/controller"
	"substrate.dev/ate/internal/k8s/k8stest"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// kubeCluster is a cluster (real API server, nodes, router over S3) whose
// nodes play the containers of worker Pods, plus a real kube-apiserver and
// `ate controller`. There is no kubelet: the test writes the Pods and
// their status, as a kubelet would once each node is up.
type kubeCluster struct {
	*cluster
	kube *k8stest.Env
	ctrl *component
}

const kubePool = "pool-a"

// kubeIssuer is the controller's --worker-cert-issuer (no cert-manager
// runs here: only the Deployment names it).
const kubeIssuer = "ClusterIssuer/ate-e2e"

func startKubeCluster(t *testing.T, timing []string, nodes ...string) *kubeCluster {
	t.Helper()
	kc := &kubeCluster{cluster: startClusterTimed(t, timing), kube: k8stest.Start(t)}
	ctx := t.Context()
	// The operator's opt-in: the controller runs pools only here.
	var ns corev1.Namespace
	if err := kc.kube.Client.Get(ctx, client.ObjectKey{Name: "default"}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{controller.PoolNamespaceLabel: controller.PoolNamespaceAllowed}
	if err := kc.kube.Client.Update(ctx, &ns); err != nil {
		t.Fatal(err)
	}
	wp := &atek8s.WorkerPool{ObjectMeta: metav1.ObjectMeta{Name: kubePool, Namespace: "default"},
		Spec: atek8s.WorkerPoolSpec{Replicas: ptr.To(int32(len(nodes)))}}
	if err := kc.kube.Client.Create(ctx, wp); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		kc.startWorkerPod(n)
	}
	// The test's nodes play worker Pods with a certificate each from
	// caDir named after their Pod, as cert-manager's csi-driver gives
	// real worker Pods through the issuer the controller names.
	kc.ctrl, _ = startComponent(t, "controller", "ate controller ready", "controller",
		// The worker Pods' nodes run here as processes with certificates
		// from caDir (no kubelet starts the Pods the controller writes);
		// the Pods it writes ask cert-manager's csi-driver for theirs, as
		// in a TLS installation (the controller requires a choice).
		"--kubeconfig", kc.kube.Kubeconfig, "--api", kc.in.apiAddr, "--leader-elect=false", "--worker-image", "ate:e2e",
		"--worker-cert-issuer", kubeIssuer, "--management-addr", freeAddr(t), "--log-level", "debug")
	return kc
}

// startWorkerPod starts node name with the labels the controller's worker
// Pods give theirs, then writes its Pod, Running and Ready.
func (kc *kubeCluster) startWorkerPod(name string) {
	kc.t.Helper()
	kc.startNode(name, kc.in.apiAddr, "--labels", atek8s.PoolLabel+"="+kubePool+",ate.substrate.dev/namespace=default")
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{atek8s.PoolLabel: kubePool, "app.kubernetes.io/managed-by": "ate-controller"}},
		Spec: corev1.PodSpec{
			// Bound to a node: a graceful delete then leaves the Pod
			// Terminating (until a kubelet, here the test, confirms).
			NodeName:   "kube-node-1",
			Containers: []corev1.Container{{Name: "node", Image: "ate"}},
		},
	}
	if err := kc.kube.Client.Create(ctx, pod); err != nil {
		kc.t.Fatal(err)
	}
	// The controller may annotate the Pod (its deletion cost) meanwhile:
	// write the status on the latest version, as a kubelet does.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := kc.kube.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
		return kc.kube.Client.Status().Update(ctx, pod)
	})
	if err != nil {
		kc.t.Fatal(err)
	}
}

// checkWorkerTLS: the pool's Deployment, as the controller applied it,
// gives its Pods a node certificate each from cert-manager's csi-driver
// through kubeIssuer, named after the Pod, at ate node's --tls-dir.
func (kc *kubeCluster) checkWorkerTLS() {
	kc.t.Helper()
	var d appsv1.Deployment
	// The pool's ready count comes from its Pods' path, its Deployment
	// from the pool path: under load the count can be seen first.
	waitFor(kc.t, "the worker Deployment", 30*time.Second, func() bool {
		return kc.kube.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: kubePool + "-workers"}, &d) == nil
	})
	spec := d.Spec.Template.Spec
	var csi map[string]string
	for _, v := range spec.Volumes {
		if v.CSI != nil && v.CSI.Driver == "csi.cert-manager.io" {
			csi = v.CSI.VolumeAttributes
		}
	}
	args := spec.Containers[0].Args
	if csi["csi.cert-manager.io/issuer-kind"]+"/"+csi["csi.cert-manager.io/issuer-name"] != kubeIssuer ||
		csi["csi.cert-manager.io/uri-sans"] != "spiffe://ate.local/ate/node/${POD_NAME}" ||
		!slices.Contains(args, "--tls-dir=/etc/ate/tls") || !slices.Contains(args, "--name=$(POD_NAME)") || slices.Contains(args, "--insecure") {
		kc.t.Fatalf("worker Pods' TLS: csi attributes %v, args %q", csi, args)
	}
}

func (kc *kubeCluster) deletePod(name string, grace int64) {
	kc.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	if err := kc.kube.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(grace)); err != nil {
		kc.t.Fatal(err)
	}
}

func (kc *kubeCluster) workersOf(node string) int {
	kc.t.Helper()
	resp, err := kc.in.client.ListWorkers(context.Background(), &atev1.ListWorkersRequest{})
	if err != nil {
		kc.t.Fatal(err)
	}
	n := 0
	for _, w := range resp.GetWorkers() {
		if w.GetNode() == node {
			n++
		}
	}
	return n
}

func (kc *kubeCluster) readyWorkers() int32 {
	kc.t.Helper()
	var wp atek8s.WorkerPool
	if err := kc.kube.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: kubePool}, &wp); err != nil {
		kc.t.Fatal(err)
	}
	return wp.Status.ReadyWorkers
}

// TestKubernetesWorkerPodLifecycle: Worker records follow worker Pods.
// A ready Pod's workers are counted on its WorkerPool; a terminating Pod
// (graceful delete) gets its node drained by the controller — its actor
// suspended, resumed on another Pod's worker with its memory; a deleted
// Pod (its container gone) gets its node removed at once, well before the
// heartbeat deadline — its actor CRASHED at the last durable snapshot and
// resumable on the next Pod.
func TestKubernetesWorkerPodLifecycle(t *testing.T) {
	// A long loss deadline: only the controller can make a node leave
	// within the test's bounds.
	timing := []string{"--node-heartbeat", "250ms", "--node-lost-after", "2m", "--snapshot-gc-interval", "1s"}
	kc := startKubeCluster(t, timing, "pool-a-1", "pool-a-2")
	waitFor(t, "WorkerPool status counting both Pods' workers", 30*time.Second, func() bool { return kc.readyWorkers() == 2 })
	kc.checkWorkerTLS()

	kc.counterActor()
	kc.in.mustCount("default/counter-1", 2)
	first := kc.nodeOf("counter-1")
	if first == "" {
		t.Fatal("running actor holds no worker")
	}

	// Terminating: the controller drains the node; the actor is
	// suspended with its memory, and the node takes no new actor.
	kc.deletePod(first, 30)
	waitFor(t, "actor suspended by the drain of its terminating Pod", 30*time.Second, func() bool {
		return kc.in.actor("counter-1").GetState().String() == "SUSPENDED"
	})
	if ph := kc.nodePhase(first); ph != atev1.Node_DRAINING {
		t.Fatalf("node %s is %s after its Pod began terminating, want DRAINING", first, ph)
	}
	kc.in.mustCount("default/counter-1", 3)
	second := kc.nodeOf("counter-1")
	if second == "" || second == first {
		t.Fatalf("actor resumed on %q, want the other Pod's node", second)
	}
	// The kubelet's part: the container exits, the Pod goes.
	kc.nodes[first].kill()
	kc.deletePod(first, 0)
	waitFor(t, "the deleted Pod's node and workers gone", 30*time.Second, func() bool {
		return kc.workersOf(first) == 0 && kc.nodePhase(first) == atev1.Node_PHASE_UNSPECIFIED
	})

	// Deleted with the actor running: RemoveNode makes the actor CRASHED
	// at once, and it resumes from its last durable snapshot on a new Pod.
	kc.in.ate("suspend", "actor", "counter-1") // durable snapshot: count=3
	kc.in.mustCount("default/counter-1", 4)    // memory past it, lost below
	kc.startWorkerPod("pool-a-3")
	kc.nodes[second].kill()
	kc.deletePod(second, 0)
	// CRASHED comes first, then the worker records go (RemoveNode).
	waitFor(t, "actor CRASHED and the node's workers gone once its Pod was deleted", 30*time.Second, func() bool {
		return kc.in.actor("counter-1").GetState().String() == "CRASHED" && kc.workersOf(second) == 0
	})
	kc.in.mustCount("default/counter-1", 4) // 3 from the snapshot, +1
	if got := kc.nodeOf("counter-1"); got != "pool-a-3" {
		t.Fatalf("resumed on %q, want pool-a-3", got)
	}
}
