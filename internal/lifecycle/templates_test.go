package lifecycle

import (
	"context"
	"errors"
	"slices"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
)

// blockingBuildNode is a fakeNode whose golden builds run until their
// context ends.
type blockingBuildNode struct {
	*fakeNode
	started chan struct{}
}

func (b *blockingBuildNode) BuildGolden(ctx context.Context, _, _, _ string, _ *atev1.ActorTemplateSpec, _ string) (string, string, error) {
	close(b.started)
	<-ctx.Done()
	return "", "", ctx.Err()
}

// TestCloseLeavesGoldenBuildForRecover: Close waits for a golden build it
// owns and cancels it, and the template stays BUILDING, so the next
// start-up's Recover builds it again.
func TestCloseLeavesGoldenBuildForRecover(t *testing.T) {
	e := newEnv(t)
	n := &blockingBuildNode{fakeNode: e.node, started: make(chan struct{})}
	m := New(e.st, testNodes{n: n, live: []string{"n1"}}, e.snaps, "test", nil)
	ctx := t.Context()
	tpl := &store.Template{Atespace: "default", Name: "building", UID: "building-uid", Phase: store.TemplateBuilding,
		Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}}}}
	must(t, e.st.CreateTemplate(ctx, tpl))
	m.StartGoldenBuild(tpl)
	<-n.started
	m.Close()
	got, err := e.st.GetTemplate(ctx, "default", "building")
	must(t, err)
	if got.Phase != store.TemplateBuilding {
		t.Fatalf("phase after Close = %v (%q), want BUILDING", got.Phase, got.Message)
	}
}

// phasedBuildNode is a fakeNode whose golden builds report phases, then
// record the template as they see it, then end with err.
type phasedBuildNode struct {
	*fakeNode
	st     store.Store
	phases []nodeapi.BuildPhase
	seen   *store.Template
	err    error
}

func (b *phasedBuildNode) BuildGolden(ctx context.Context, uid, atespace, name string, _ *atev1.ActorTemplateSpec, _ string) (string, string, error) {
	for _, p := range b.phases {
		nodeapi.Progress(ctx, p)
	}
	var err error
	if b.seen, err = b.st.GetTemplate(ctx, atespace, name); err != nil {
		return "", "", err
	}
	if b.err != nil {
		return "", "", b.err
	}
	return uid + "/golden", "sha256:x", nil
}

// TestGoldenBuildPhases: while a template is BUILDING its status lists
// the phases begun, oldest first, as BuildPhases and, for clients older
// than those, as their text joined in the message; READY clears the
// message and keeps the phases (a client that polled too late for them
// still shows them), FAILED replaces the message by the reason and keeps
// the phases.
func TestGoldenBuildPhases(t *testing.T) {
	phases := []nodeapi.BuildPhase{nodeapi.PhaseImage, nodeapi.PhaseBoot}
	wantPhases := []atev1.BuildPhase{atev1.BuildPhase_IMAGE, atev1.BuildPhase_BOOT}
	for _, tc := range []struct {
		name        string
		err         error
		wantPhase   store.TemplatePhase
		wantMessage string
		wantPhases  []atev1.BuildPhase
	}{
		{"ready", nil, store.TemplateReady, "", wantPhases},
		{"failed", errors.New("probe timed out"), store.TemplateFailed, "probe timed out", wantPhases},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			n := &phasedBuildNode{fakeNode: e.node, st: e.st, phases: phases, err: tc.err}
			m := New(e.st, testNodes{n: n, live: []string{"n1"}}, e.snaps, "test", nil)
			t.Cleanup(m.Close)
			ctx := t.Context()
			// As an attempt interrupted before this one left it: its
			// phases must not stay beside this build's.
			tpl := &store.Template{Atespace: "default", Name: "building", UID: "building-uid", Phase: store.TemplateBuilding,
				BuildPhases: []atev1.BuildPhase{atev1.BuildPhase_IMAGE}, Message: atev1.BuildPhase_IMAGE.Text(),
				Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}}}}
			must(t, e.st.CreateTemplate(ctx, tpl))
			m.BuildGolden(ctx, tpl)

			if want := "pulling and unpacking the image" + atev1.BuildPhaseSeparator + "booting the sandbox"; n.seen == nil ||
				!slices.Equal(n.seen.BuildPhases, wantPhases) || n.seen.Message != want {
				t.Fatalf("while BUILDING: %+v; want phases %v, message %q", n.seen, wantPhases, want)
			}
			got, err := e.st.GetTemplate(ctx, "default", "building")
			must(t, err)
			if got.Phase != tc.wantPhase || got.Message != tc.wantMessage || !slices.Equal(got.BuildPhases, tc.wantPhases) {
				t.Errorf("after the build: phase %v, message %q, phases %v; want %v, %q, %v",
					got.Phase, got.Message, got.BuildPhases, tc.wantPhase, tc.wantMessage, tc.wantPhases)
			}
		})
	}
}
