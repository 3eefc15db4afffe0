package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCreateTemplateWaitShowsPhases: `ate create template --wait` prints
// the golden build's phases in order and returns once it is READY; a
// build that fails makes it exit non-zero with the failure's message.
func TestCreateTemplateWaitShowsPhases(t *testing.T) {
	in := startUp(t, 1)
	_, errOut, code := in.ateRun(nil, "create", "template", "-f", filepath.Join(repoDir, "examples/counter/template.yaml"), "--wait")
	if code != 0 {
		t.Fatalf("create template --wait: exit %d, stderr %q", code, errOut)
	}
	phases := []string{"pulling and unpacking the image", "booting the sandbox", "waiting for the wakeup probe",
		"checkpointing the golden snapshot", "template default/counter READY"}
	at := 0
	for _, p := range phases {
		i := strings.Index(errOut[at:], p)
		if i < 0 {
			t.Fatalf("create template --wait output lacks %q after the earlier phases:\n%s", p, errOut)
		}
		at += i + len(p)
	}

	bad := "name: broken\ncontainers:\n- name: c\n  image: oci:" + filepath.Join(repoDir, "build/images/counter") +
		"\n  command: [\"/no/such/program\"]\n  ports: [8080]\nwakeupProbe:\n  httpGet: {path: /healthz, port: 8080}\n"
	_, errOut, code = in.ateRun(strings.NewReader(bad), "create", "template", "-f", "-", "--wait")
	if code != 1 || !strings.Contains(errOut, "FAILED") || !strings.Contains(errOut, "/no/such/program") {
		t.Fatalf("create template --wait of a failing build: exit %d, stderr %q; want 1 and FAILED with the reason", code, errOut)
	}
}
