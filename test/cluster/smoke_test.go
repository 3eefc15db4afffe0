package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPodRuns: a Pod of the ate image, pulled by containerd from the
// registry through an image pull Secret, runs to completion on the node,
// with a Pod IP from the CNI bridge, and its log is readable through the
// API server (kubelet authentication and authorization). Without the
// Secret the registry refuses the pull.
func TestPodRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	image := kc.reg.addr + "/ate/ate:test"
	if _, err := kc.kubectl(ctx, "create", "secret", "docker-registry", "smoke-pull", "--docker-server="+kc.reg.addr,
		"--docker-username="+registryUser, "--docker-password="+kc.reg.password); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.kubectl(ctx, "run", "smoke", "--image="+image, "--image-pull-policy=Always", "--restart=Never",
		`--overrides={"spec": {"imagePullSecrets": [{"name": "smoke-pull"}]}}`, "--", "--help"); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.kubectl(ctx, "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/smoke", "--timeout=90s"); err != nil {
		out, _ := kc.kubectl(ctx, "describe", "pod", "smoke")
		t.Fatalf("%v\n%s", err, out)
	}
	logs, err := kc.kubectl(ctx, "logs", "smoke")
	if err != nil || !strings.Contains(logs, "apiserver") {
		t.Fatalf("logs %q: %v", logs, err)
	}
	// The same image with no pull Secret: the registry refuses
	// containerd, which the kubelet reports as the container's reason.
	if _, err := kc.kubectl(ctx, "run", "smoke-anonymous", "--image="+image, "--image-pull-policy=Always", "--restart=Never", "--", "--help"); err != nil {
		t.Fatal(err)
	}
	if err := kc.waitFor("the anonymous pull refused", 90*time.Second, func() error {
		out, err := kc.kubectl(ctx, "get", "pod", "smoke-anonymous", "-o", "jsonpath={.status.containerStatuses[0].state.waiting.reason} {.status.containerStatuses[0].state.waiting.message}")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(out, "ErrImagePull") && !strings.HasPrefix(out, "ImagePullBackOff") {
			return fmt.Errorf("waiting reason %q", out)
		}
		return nil
	}); err != nil {
		out, _ := kc.kubectl(ctx, "describe", "pod", "smoke-anonymous")
		t.Fatalf("%v\n%s", err, out)
	}
	if out, _ := kc.kubectl(ctx, "get", "events", "--field-selector", "involvedObject.name=smoke-anonymous", "-o", "jsonpath={.items[*].message}"); !strings.Contains(out, "authorization failed") {
		t.Errorf("the anonymous pull's events say %q, want the registry's refusal (authorization failed)", out)
	}
	if _, err := kc.kubectl(ctx, "delete", "pod", "smoke", "smoke-anonymous", "--wait"); err != nil {
		t.Fatal(err)
	}
}
