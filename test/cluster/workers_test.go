package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// podOf is the worker Pod (node) running actor (atespace/name), from
// `kubectl ate get workers`; "" when no worker holds it.
func (in *install) podOf(ctx context.Context, actor string) (string, error) {
	out, err := in.ate(ctx, "get", "workers")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[3] == actor {
			return f[1], nil
		}
	}
	return "", nil
}

// actorState is the actor's STATE column of `kubectl ate get actor`.
func (in *install) actorState(ctx context.Context, actor string) (string, error) {
	out, err := in.ate(ctx, "get", "actors")
	if err != nil {
		return "", err
	}
	atespace, name, _ := strings.Cut(actor, "/")
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == atespace && f[1] == name {
			return f[3], nil
		}
	}
	return "", fmt.Errorf("actor %s not listed: %s", actor, out)
}

// testWorkerPodDeleted: deleting a worker Pod that runs an actor suspends
// the actor within the Pod's grace period (the Pod is gone well before
// it), and the next request resumes it on another worker with its memory.
func testWorkerPodDeleted(t *testing.T, ctx context.Context, in *install) {
	if _, err := in.ate(ctx, "create", "actor", "counter-2", "--template", "counter"); err != nil {
		t.Fatal(err)
	}
	in.hit(t, ctx, "default/counter-2")
	in.hit(t, ctx, "default/counter-2")
	pod, err := in.podOf(ctx, "default/counter-2")
	if err != nil || pod == "" {
		t.Fatalf("worker Pod of counter-2: %q %v", pod, err)
	}
	start := time.Now()
	if _, err := kc.kubectl(ctx, "-n", ns, "delete", "pod", pod, "--wait", "--timeout=90s"); err != nil {
		t.Fatal(err)
	}
	gone := time.Since(start)
	// Well before the pool's 60 s terminationGracePeriodSeconds: the node
	// leaves once its actors are checkpointed, not when SIGKILLed.
	if gone >= 30*time.Second {
		t.Fatalf("worker Pod took %s to go, not well before its 60 s grace: the node did not leave once drained", gone)
	}
	t.Logf("worker Pod %s deleted and gone in %s", pod, gone.Round(time.Millisecond))
	in.deletedWorker = pod
	if st, err := in.actorState(ctx, "default/counter-2"); err != nil || st != "SUSPENDED" {
		t.Fatalf("counter-2 after its Pod was deleted: %q %v, want SUSPENDED", st, err)
	}
	in.hit(t, ctx, "default/counter-2")
	if now, err := in.podOf(ctx, "default/counter-2"); err != nil || now == pod || now == "" {
		t.Fatalf("counter-2 resumed on Pod %q (%v), want another than %s", now, err, pod)
	}
	waitPool(t, ctx, 3)
}

// testDrain: `kubectl drain` (cordon, then the Eviction API, which honours
// the PodDisruptionBudget over the worker Pods) of the Pod running an
// actor suspends it, and its next request resumes it elsewhere with its
// memory; a second eviction that would leave fewer worker Pods than the
// budget allows is refused, and that Pod's actor keeps running.
func testDrain(t *testing.T, ctx context.Context, in *install) {
	// A user's budget for the pool's worker Pods: at most one down at a time.
	pdb := `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: example-workers, namespace: ate-system}
spec:
  minAvailable: 2
  selector: {matchLabels: {ate.substrate.dev/pool: example}}
`
	if _, err := kc.apply(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	if err := kc.waitFor("PodDisruptionBudget allows 1", time.Minute, func() error {
		out, err := kc.kubectl(ctx, "-n", ns, "get", "pdb", "example-workers", "-o", "jsonpath={.status.disruptionsAllowed}")
		if err != nil || strings.TrimSpace(out) != "1" {
			return fmt.Errorf("disruptionsAllowed %q %v", out, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	in.hit(t, ctx, "default/counter-1")
	first, err := in.podOf(ctx, "default/counter-1")
	if err != nil || first == "" {
		t.Fatalf("worker Pod of counter-1: %q %v", first, err)
	}
	in.hit(t, ctx, "default/counter-2")
	// The second eviction's target: counter-2's Pod when it is not
	// counter-1's (then counter-2 must stay put), else another one.
	second, err := in.podOf(ctx, "default/counter-2")
	if err != nil {
		t.Fatal(err)
	}
	checkStays := second != first && second != ""
	if !checkStays {
		out, err := kc.kubectl(ctx, "-n", ns, "get", "pods", "-l", "ate.substrate.dev/pool=example", "-o", "jsonpath={.items[*].metadata.name}")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range strings.Fields(out) {
			if p != first {
				second = p
			}
		}
	}
	t.Cleanup(func() { _, _ = kc.kubectl(context.Background(), "uncordon", nodeName) })
	drain := func(pod, timeout string) (string, error) {
		if _, err := kc.kubectl(ctx, "-n", ns, "label", "pod", pod, "--overwrite", "drain-test=now"); err != nil {
			return "", err
		}
		return kc.kubectl(ctx, "drain", nodeName, "--pod-selector=drain-test=now", "--delete-emptydir-data", "--ignore-daemonsets", "--timeout="+timeout)
	}
	if _, err := drain(first, "90s"); err != nil {
		t.Fatal(err)
	}
	if st, err := in.actorState(ctx, "default/counter-1"); err != nil || st != "SUSPENDED" {
		t.Fatalf("counter-1 after its Pod was evicted: %q %v, want SUSPENDED", st, err)
	}
	in.hit(t, ctx, "default/counter-1")
	// The node is cordoned: the evicted Pod's replacement stays Pending,
	// two worker Pods remain, and the budget allows no more evictions.
	out, err := drain(second, "15s")
	if err == nil || !strings.Contains(out, "disruption budget") {
		t.Fatalf("second drain: %v\n%s\nwant it refused by the PodDisruptionBudget", err, out)
	}
	in.hit(t, ctx, "default/counter-2")
	if now, _ := in.podOf(ctx, "default/counter-2"); checkStays && now != second {
		t.Fatalf("counter-2 moved from %s to %q though its Pod's eviction was refused", second, now)
	}
	if _, err := kc.kubectl(ctx, "uncordon", nodeName); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.kubectl(ctx, "-n", ns, "label", "pod", second, "drain-test-"); err != nil {
		t.Fatal(err)
	}
	waitPool(t, ctx, 3)
}

// testEvidence: what a failure prints holds the cluster's events, the
// log of every worker Pod that ran — deleted ones too, which the kubelet
// no longer has — and the cluster components' logs.
func testEvidence(t *testing.T, ctx context.Context, in *install) {
	ev := collectEvidence(ctx)
	for _, want := range []string{"=== kubectl get events", "Killing", "=== kube-apiserver", "=== kubelet", "ate node ready"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence has no %q", want)
		}
	}
	if in.deletedWorker == "" || !strings.Contains(ev, "ate-system_"+in.deletedWorker+"_") {
		t.Errorf("evidence has no log of the deleted worker Pod %q", in.deletedWorker)
	}
}
