package lifecycle

import (
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/store"
)

// TestNewActorsSource: an actor without a snapshot of its own restores its
// template's golden snapshot when the template says newActors golden, or
// says nothing and has an onRestore hook to reseed; otherwise it boots,
// sharing no memory with its siblings. An actor with a snapshot always
// restores its own.
func TestNewActorsSource(t *testing.T) {
	hook := &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Path: "/ate/restored", Port: 8080}}
	for _, tc := range []struct {
		name      string
		newActors string
		onRestore *atev1.RestoreHook
		phase     store.TemplatePhase
		snapshot  string // the actor's own
		want      string // the ref restored; "" is a cold boot
	}{
		{"default without a hook boots", "", nil, store.TemplateReady, "", ""},
		{"default with a hook restores golden", "", hook, store.TemplateReady, "", "tpl-uid/golden"},
		{"coldBoot with a hook boots", NewActorsColdBoot, hook, store.TemplateReady, "", ""},
		{"default restores the actor's own", "", nil, store.TemplateReady, "a-uid/s1", "a-uid/s1"},
		{"golden restores golden", NewActorsGolden, nil, store.TemplateReady, "", "tpl-uid/golden"},
		{"coldBoot boots", NewActorsColdBoot, nil, store.TemplateReady, "", ""},
		{"coldBoot restores the actor's own", NewActorsColdBoot, nil, store.TemplateReady, "a-uid/s1", "a-uid/s1"},
		{"golden restores the actor's own", NewActorsGolden, nil, store.TemplateReady, "a-uid/s1", "a-uid/s1"},
		{"no golden snapshot yet boots", NewActorsGolden, hook, store.TemplateBuilding, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl := &store.Template{Phase: tc.phase, GoldenSnapshot: "tpl-uid/golden",
				Spec: &atev1.ActorTemplateSpec{NewActors: tc.newActors, OnRestore: tc.onRestore}}
			a := &store.Actor{UID: "a-uid", Lifecycle: store.Lifecycle{Snapshot: tc.snapshot}}
			if got := (&Manager{}).durableSource(a, tpl); got.ref != tc.want {
				t.Fatalf("source %q, want %q", got.ref, tc.want)
			}
		})
	}
}

// TestColdBootTemplateResume: through Resume, a new actor of a coldBoot
// template asks the node for a boot, not the golden snapshot.
func TestColdBootTemplateResume(t *testing.T) {
	e := newEnv(t)
	tpl, err := e.st.GetTemplate(t.Context(), "default", "tpl")
	must(t, err)
	cold := *tpl
	cold.Name, cold.UID = "cold", "cold-uid"
	cold.Spec = &atev1.ActorTemplateSpec{Containers: tpl.Spec.GetContainers(), NewActors: NewActorsColdBoot}
	must(t, e.st.CreateTemplate(t.Context(), &cold))
	must(t, e.st.CreateActor(t.Context(), &store.Actor{Atespace: "default", Name: "c", UID: "c-uid", Template: "cold", Lifecycle: store.Lifecycle{State: store.Suspended}}))
	if _, err := e.m.Resume(t.Context(), key("c")); err != nil {
		t.Fatal(err)
	}
	if e.node.last.Snapshot != "" {
		t.Fatalf("new actor of a coldBoot template restored %q, want a cold boot", e.node.last.Snapshot)
	}
}
