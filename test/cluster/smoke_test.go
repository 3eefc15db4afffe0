package cluster

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestPodRuns: a Pod of the imported ate image runs to completion on the
// node, with a Pod IP from the CNI bridge, and its log is readable
// through the API server (kubelet authentication and authorization).
func TestPodRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := kc.kubectl(ctx, "run", "smoke", "--image=ate.local/ate:test", "--restart=Never", "--", "--help"); err != nil {
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
	if _, err := kc.kubectl(ctx, "delete", "pod", "smoke", "--wait"); err != nil {
		t.Fatal(err)
	}
}
