package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
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
	// Every phase is printed, in build order, and READY ends it: READY
	// keeps the phase list, so a fast build (here 200 ms, less than
	// one poll) loses none (docs/debugging.md).
	at := 0
	for _, p := range []atev1.BuildPhase{atev1.BuildPhase_IMAGE, atev1.BuildPhase_BOOT, atev1.BuildPhase_PROBE, atev1.BuildPhase_CHECKPOINT} {
		i := strings.Index(errOut[at:], p.Text())
		if i < 0 {
			t.Fatalf("create template --wait output lacks the phase %q, or has it out of order:\n%s", p.Text(), errOut)
		}
		at += i + len(p.Text())
	}
	if !strings.Contains(errOut[at:], "template default/counter READY") {
		t.Fatalf("create template --wait output lacks READY after the phases:\n%s", errOut)
	}

	bad := "name: broken\ncontainers:\n- name: c\n  image: oci:" + filepath.Join(repoDir, "build/images/counter") +
		"\n  command: [\"/no/such/program\"]\n  ports: [8080]\nwakeupProbe:\n  httpGet: {path: /healthz, port: 8080}\n"
	_, errOut, code = in.ateRun(strings.NewReader(bad), "create", "template", "-f", "-", "--wait")
	if code != 1 || !strings.Contains(errOut, atev1.ActorTemplateStatus_FAILED.String()) || !strings.Contains(errOut, "/no/such/program") {
		t.Fatalf("create template --wait of a failing build: exit %d, stderr %q; want 1 and FAILED with the reason", code, errOut)
	}
}
