package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestCreateTemplateWait: `ate create template --wait` prints each phase
// of the golden build once, in order, from the status's build_phases,
// and ends at READY (exit 0) or FAILED (exit 1 with the message). From
// an API server older than the enums (phase_name only, no build_phases)
// it still ends at READY or FAILED, without progress lines.
func TestCreateTemplateWait(t *testing.T) {
	const (
		image = atev1.BuildPhase_IMAGE
		boot  = atev1.BuildPhase_BOOT
		probe = atev1.BuildPhase_PROBE
	)
	building := func(phases ...atev1.BuildPhase) *atev1.ActorTemplateStatus {
		return &atev1.ActorTemplateStatus{Phase: atev1.ActorTemplateStatus_BUILDING, BuildPhases: phases}
	}
	for _, tc := range []struct {
		name     string
		statuses []*atev1.ActorTemplateStatus // the template's, poll by poll
		code     int
		stdout   string
		stderr   string
	}{
		{name: "phases then READY",
			statuses: []*atev1.ActorTemplateStatus{building(), building(), building(image), building(image, boot, probe),
				building(image, boot, probe), {Phase: atev1.ActorTemplateStatus_READY}},
			stdout: "template default/web created (golden snapshot building)\n",
			stderr: "  pulling and unpacking the image (0s)\n  booting the sandbox (0s)\n  waiting for the wakeup probe (0s)\n" +
				"template default/web READY after 0s\n"},
		{name: "FAILED keeps the reason",
			statuses: []*atev1.ActorTemplateStatus{building(), building(image),
				{Phase: atev1.ActorTemplateStatus_FAILED, Message: "image not found", BuildPhases: []atev1.BuildPhase{image}}},
			code:   1,
			stdout: "template default/web created (golden snapshot building)\n",
			stderr: "  pulling and unpacking the image (0s)\n" +
				"Error: golden build of template default/web FAILED after 0s: image not found\n"},
		{name: "older server: phase_name only",
			statuses: []*atev1.ActorTemplateStatus{older(atev1.ActorTemplateStatus_BUILDING, ""),
				older(atev1.ActorTemplateStatus_BUILDING, image.Text()), older(atev1.ActorTemplateStatus_READY, "")},
			stdout: "template default/web created (golden snapshot building)\n",
			stderr: "template default/web READY after 0s\n"},
		{name: "older server: FAILED",
			statuses: []*atev1.ActorTemplateStatus{older(atev1.ActorTemplateStatus_BUILDING, ""),
				older(atev1.ActorTemplateStatus_FAILED, "boom")},
			code:   1,
			stdout: "template default/web created (golden snapshot building)\n",
			stderr: "Error: golden build of template default/web FAILED after 0s: boom\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.statuses = tc.statuses
			res := runServer(t, f, "create", "template", "-f", writeWebTemplate(t), "--wait")
			if res.code != tc.code || res.stdout != tc.stdout || res.stderr != tc.stderr {
				t.Errorf("exit %d, stdout\n%s\nstderr\n%s\nwant exit %d, stdout\n%s\nstderr\n%s",
					res.code, res.stdout, res.stderr, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

// older is a template status as an API server older than the phase enum
// sends it: phase_name alone (and message).
func older(p atev1.ActorTemplateStatus_Phase, message string) *atev1.ActorTemplateStatus {
	st := &atev1.ActorTemplateStatus{Message: message}
	st.FillPhase(p)
	st.Phase = atev1.ActorTemplateStatus_PHASE_UNSPECIFIED
	return st
}

// writeWebTemplate writes a minimal template named web and returns its path.
func writeWebTemplate(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "web.yaml")
	if err := os.WriteFile(p, []byte("name: web\ncontainers:\n- name: c\n  image: oci:/images/web\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPhasesFromOlderServer: the phases of templates and workers an API
// server older than the enums sends (phase_name only) are shown as
// their names.
func TestPhasesFromOlderServer(t *testing.T) {
	f := newFake()
	f.templates["default/counter"].Status = older(atev1.ActorTemplateStatus_READY, "")
	f.workers = []*atev1.Worker{{Name: "w-0", Node: "local", Actor: "default/counter-1"}, {Name: "w-1", Node: "local"}}
	// As an API server older than the enum sends them: phase_name alone.
	f.workers[0].FillPhase(atev1.Worker_CLAIMED)
	f.workers[1].FillPhase(atev1.Worker_FREE)
	for _, w := range f.workers {
		w.Phase = atev1.Worker_PHASE_UNSPECIFIED
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"get", "templates"}, []string{"counter   READY"}},
		{[]string{"get", "workers"}, []string{"w-0    local   CLAIMED", "w-1    local   FREE"}},
	} {
		res := runServer(t, f, tc.args...)
		for _, w := range tc.want {
			if res.code != 0 || !strings.Contains(res.stdout, w) {
				t.Errorf("ate %s: exit %d, stdout\n%s\nwant a line with %q", strings.Join(tc.args, " "), res.code, res.stdout, w)
			}
		}
	}
}

// TestPhaseJSONName: -o json shows a phase under the name it always had
// ("phase", now the enum's JSON name), as its name.
func TestPhaseJSONName(t *testing.T) {
	res := runServer(t, newFake(), "get", "template", "counter", "-o", "json")
	if res.code != 0 || !strings.Contains(res.stdout, `"phase": "READY"`) {
		t.Errorf("exit %d, stdout\n%s\nwant \"phase\": \"READY\"", res.code, res.stdout)
	}
}
