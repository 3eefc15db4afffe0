package lifecycle

import (
	"context"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
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
