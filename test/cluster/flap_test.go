package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"substrate.dev/ate/internal/k8s/k8stest"
)

// oldCharts writes copies of the two charts as an earlier release would
// have them: the WorkerPool CRD without spec.template.priorityClassName,
// and the controller's ClusterRole without SandboxConfigs, which the
// controller watches. It returns the crds and substrate chart paths.
func oldCharts(t *testing.T, dir string) (crds, substrate string) {
	t.Helper()
	root := k8stest.RepoRoot()
	edit := func(src, dst, file, old, new string) {
		if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, file)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), old) {
			t.Fatalf("%s has no %q to take out: the test is out of date with the chart", p, old)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	crds, substrate = filepath.Join(dir, "old", "substrate-crds"), filepath.Join(dir, "old", "substrate")
	edit(filepath.Join(root, "deploy/helm/substrate-crds"), crds, "templates/ate.substrate.dev_workerpools.yaml",
		"                  priorityClassName:\n                    type: string\n", "")
	edit(filepath.Join(root, "deploy/helm/substrate"), substrate, "templates/controller.yaml",
		"  resources: [workerpools, sandboxconfigs]\n  verbs: [get, list, watch]", "  resources: [workerpools]\n  verbs: [get, list, watch]")
	return crds, substrate
}

// controllerReadyz is the active controller's /readyz status and body.
func controllerReadyz(ctx context.Context) (int, string, error) {
	_, ip, err := onePod(ctx, "controller")
	if err != nil {
		return 0, "", err
	}
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + ip + ":8081/readyz?verbose")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// workersAt waits until the worker Deployment has want ready replicas.
func workersAt(ctx context.Context, want int, within time.Duration) error {
	return kc.waitFor(fmt.Sprintf("the worker Deployment at %d ready replicas", want), within, func() error {
		out, err := kc.kubectl(ctx, "-n", ns, "get", "deployment", "example-workers", "-o", "jsonpath={.spec.replicas} {.status.readyReplicas}")
		if err != nil {
			return err
		}
		if f := strings.Fields(out); len(f) != 2 || f[0] != itoa(want) || f[1] != itoa(want) {
			return fmt.Errorf("spec.replicas, readyReplicas = %q", out)
		}
		return nil
	})
}

// testFlapAndUpgrade: the controller self-heals while an unrelated List
// fails and across a frozen kube-apiserver, and a helm upgrade applies
// changed CRD schemas and RBAC.
//
//  1. Downgrade to charts whose controller may not list SandboxConfigs and
//     whose WorkerPool CRD lacks a field (an earlier release), and restart
//     the controller: its SandboxConfig watch cannot start, and /readyz
//     says so (the rollout of a controller short of a permission must not
//     look healthy).
//  2. Scale the worker Deployment to 0: the controller restores it within
//     seconds all the same (the failing watch idles only what needs it).
//  3. Scale it to 0 again and SIGSTOP kube-apiserver for 30 s: after
//     SIGCONT the controller recovers by itself and the Deployment is back
//     at its replicas within a bounded time.
//  4. Upgrade to the current charts: the CRD field is accepted and the
//     controller is ready.
func testFlapAndUpgrade(t *testing.T, ctx context.Context, in *install, dir string) {
	oldCRDs, oldChart := oldCharts(t, dir)
	const probe = `apiVersion: ate.substrate.dev/v1alpha1
kind: WorkerPool
metadata: {name: probe, namespace: ate-system}
spec:
  replicas: 0
  template: {priorityClassName: system-node-critical}
`
	serverDryRun := func() error {
		_, err := kc.apply(ctx, probe, "--dry-run=server", "--validate=strict")
		return err
	}
	if _, err := helm(ctx, "upgrade", "substrate-crds", oldCRDs, "--wait"); err != nil {
		t.Fatal(err)
	}
	if _, err := helm(ctx, "upgrade", "substrate", oldChart, "-n", ns, "-f", in.valuesFile); err != nil {
		t.Fatal(err)
	}
	if err := serverDryRun(); err == nil || !strings.Contains(err.Error(), "priorityClassName") {
		t.Fatalf("a WorkerPool with spec.template.priorityClassName under the old CRD: %v, want refused as an unknown field", err)
	}
	if _, err := kc.kubectl(ctx, "-n", ns, "rollout", "restart", "deployment/ate-controller"); err != nil {
		t.Fatal(err)
	}
	if err := kc.waitFor("the controller's /readyz naming the SandboxConfig watch", 2*time.Minute, func() error {
		code, body, err := controllerReadyz(ctx)
		if err != nil {
			return err
		}
		if code == http.StatusOK || !strings.Contains(strings.ToLower(body), "sandboxconfig") {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// 2. Self-heal with one List failing.
	if _, err := kc.kubectl(ctx, "-n", ns, "scale", "deployment/example-workers", "--replicas=0"); err != nil {
		t.Fatal(err)
	}
	if err := workersAt(ctx, 3, 90*time.Second); err != nil {
		t.Fatal(err)
	}

	// 3. The API server frozen for 30 s.
	if _, err := kc.kubectl(ctx, "-n", ns, "scale", "deployment/example-workers", "--replicas=0"); err != nil {
		t.Fatal(err)
	}
	api := kc.procs["kube-apiserver"].cmd.Process.Pid
	if err := syscall.Kill(api, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// Whatever happens below, the API server runs again.
	t.Cleanup(func() { _ = syscall.Kill(api, syscall.SIGCONT) })
	select {
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	if err := syscall.Kill(api, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver stopped for %s", time.Since(stopped).Round(100*time.Millisecond))
	resumed := time.Now()
	if err := workersAt(ctx, 3, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("worker Deployment back at 3 ready replicas %s after the API server returned", time.Since(resumed).Round(100*time.Millisecond))

	// 4. The upgrade applies the CRD schema and the RBAC.
	if _, err := helm(ctx, "upgrade", "substrate-crds", "deploy/helm/substrate-crds", "--wait"); err != nil {
		t.Fatal(err)
	}
	if _, err := helm(ctx, "upgrade", "substrate", "deploy/helm/substrate", "-n", ns, "-f", in.valuesFile); err != nil {
		t.Fatal(err)
	}
	if err := kc.waitFor("the new CRD field accepted", time.Minute, serverDryRun); err != nil {
		t.Fatal(err)
	}
	if err := kc.waitFor("the controller ready", 2*time.Minute, func() error {
		code, body, err := controllerReadyz(ctx)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("/readyz %d %q", code, body)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	in.hit(t, ctx, "default/counter-1")
}
