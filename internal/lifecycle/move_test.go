package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/store"
)

func dataSpec(class string, vols []string, mounts map[string]string) *atev1.ActorTemplateSpec {
	c := &atev1.ContainerSpec{Name: "c", Image: "oci:/x"}
	for name, path := range mounts {
		c.VolumeMounts = append(c.VolumeMounts, &atev1.VolumeMount{Name: name, MountPath: path})
	}
	s := &atev1.ActorTemplateSpec{SandboxClass: class, Containers: []*atev1.ContainerSpec{c}}
	for _, v := range vols {
		s.Volumes = append(s.Volumes, &atev1.Volume{Name: v})
	}
	return s
}

func TestSameData(t *testing.T) {
	base := dataSpec("", []string{"data", "cache"}, map[string]string{"data": "/data", "cache": "/cache"})
	for _, tc := range []struct {
		name string
		to   *atev1.ActorTemplateSpec
		want []string // substrings of the error; none: compatible
	}{
		{"identical, order aside", dataSpec("gvisor", []string{"cache", "data"}, map[string]string{"cache": "/cache", "data": "/data"}), nil},
		{"volume missing", dataSpec("", []string{"data"}, map[string]string{"data": "/data"}), []string{"volumes [cache, data] vs [data]"}},
		{"volume renamed", dataSpec("", []string{"data", "tmp"}, map[string]string{"data": "/data", "tmp": "/cache"}), []string{"volumes", "tmp"}},
		{"mount path moved", dataSpec("", []string{"data", "cache"}, map[string]string{"data": "/srv/data", "cache": "/cache"}), []string{"volume mounts", "c:data@/srv/data"}},
		{"sandbox class", dataSpec("fake", []string{"data", "cache"}, map[string]string{"data": "/data", "cache": "/cache"}), []string{"sandbox class gvisor vs fake"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := SameData(base, tc.to)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("SameData = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("SameData = nil, want a difference")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("SameData = %q, want it to name %q", err, w)
				}
			}
		})
	}
}

// TestMoveTemplate: a suspended actor moves keeping its snapshot for its
// volumes only, and its next resume restores the new template's golden
// snapshot with that snapshot's volumes; a suspend afterwards makes the
// new snapshot whole again.
func TestMoveTemplate(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	must(t, e.st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl2", UID: "tpl2-uid",
		Phase: store.TemplateReady, GoldenSnapshot: "tpl2-uid/golden", ImageDigest: "sha256:tpl2",
		Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}}, NewActors: NewActorsGolden}}))
	e.resume(t)
	if _, err := e.m.Suspend(ctx, key("a")); err != nil {
		t.Fatal(err)
	}
	own := e.get(t).Snapshot
	out, err := e.m.MoveTemplate(ctx, key("a"), "tpl2")
	must(t, err)
	if out.Template != "tpl2" || !out.VolumesOnly || out.Snapshot != own || out.State != store.Suspended {
		t.Fatalf("moved actor: template %s volumesOnly %v snapshot %s state %s", out.Template, out.VolumesOnly, out.Snapshot, out.State)
	}
	e.resume(t)
	e.node.mu.Lock()
	last := e.node.last
	e.node.mu.Unlock()
	if last.Snapshot != "tpl2-uid/golden" || last.VolumesFrom != own || last.ImageDigest != "sha256:tpl2" {
		t.Fatalf("resume after the move started %+v, want tpl2's golden snapshot with volumes from %s", last, own)
	}
	if a := e.get(t); !a.VolumesOnly {
		t.Fatal("a running moved actor must keep VolumesOnly until a new snapshot: a revert falls back to the old one")
	}
	if _, err := e.m.Suspend(ctx, key("a")); err != nil {
		t.Fatal(err)
	}
	if a := e.get(t); a.VolumesOnly || a.Snapshot == own {
		t.Fatalf("after a suspend on tpl2: volumesOnly %v snapshot %s (old %s)", a.VolumesOnly, a.Snapshot, own)
	}
	e.resume(t)
	e.node.mu.Lock()
	last = e.node.last
	e.node.mu.Unlock()
	if last.VolumesFrom != "" || last.Snapshot != e.get(t).Snapshot {
		t.Fatalf("second resume started %+v, want the actor's own snapshot, whole", last)
	}
}

func TestMoveTemplateRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	must(t, e.st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "vols", UID: "vols-uid", Phase: store.TemplateReady,
		Spec: dataSpec("", []string{"data"}, map[string]string{"data": "/data"})}))
	must(t, e.st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "same", UID: "same-uid", Phase: store.TemplateReady,
		Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/y"}}}}))
	refused := func(to string, want ...string) {
		t.Helper()
		_, err := e.m.MoveTemplate(ctx, key("a"), to)
		if !errors.Is(err, ErrFailedPrecondition) {
			t.Fatalf("move to %s: %v, want ErrFailedPrecondition", to, err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("move to %s: %q does not say %q", to, err, w)
			}
		}
		if a := e.get(t); a.Template != "tpl" {
			t.Fatalf("a refused move changed the template to %s", a.Template)
		}
	}
	refused("vols", "volumes [] vs [data]")
	if _, err := e.m.MoveTemplate(ctx, key("a"), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("move to a missing template: %v, want ErrNotFound", err)
	}
	e.resume(t)
	refused("same", "RUNNING", "suspend it first")
	if _, err := e.m.Pause(ctx, key("a")); err != nil {
		t.Fatal(err)
	}
	refused("same", "PAUSED", "node-local", "suspend it first")
}
