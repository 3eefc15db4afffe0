package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/image"
)

// fakeImages answers Inspect from a map; a missing image is ErrNotFound
// and one mapped to nil config fails like an unreachable registry.
type fakeImages map[string]*image.Config

func (f fakeImages) Inspect(_ context.Context, _, ref string) (image.Config, error) {
	cfg, ok := f[ref]
	switch {
	case ref == "registry.example/private":
		return image.Config{}, fmt.Errorf("%w: registry.example/private: UNAUTHORIZED", image.ErrUnauthorized)
	case !ok:
		return image.Config{}, fmt.Errorf("%w: no OCI image layout at %s", image.ErrNotFound, strings.TrimPrefix(ref, "oci:"))
	case cfg == nil:
		return image.Config{}, errors.New("fetch registry.example/app: connection refused")
	}
	return *cfg, nil
}

func TestImageDefaults(t *testing.T) {
	images := fakeImages{
		"oci:/images/counter":  {ExposedPorts: []int{8080}},
		"oci:/images/two":      {ExposedPorts: []int{8080, 9090}},
		"oci:/images/none":     {},
		"registry.example/app": nil,
	}
	for _, tc := range []struct {
		name      string
		mutate    func(*atev1.ActorTemplateSpec)
		wantPorts []int32
		code      codes.Code // OK: accepted
		want      string     // substring of the error
	}{
		{name: "listed ports kept", mutate: func(*atev1.ActorTemplateSpec) {}, wantPorts: []int32{8080}},
		{name: "ports from the image", mutate: func(s *atev1.ActorTemplateSpec) { s.Containers[0].Ports = nil }, wantPorts: []int32{8080}},
		{name: "every exposed port, lowest first", mutate: func(s *atev1.ActorTemplateSpec) {
			s.Containers[0].Image, s.Containers[0].Ports = "oci:/images/two", nil
		}, wantPorts: []int32{8080, 9090}},
		{name: "no port anywhere", mutate: func(s *atev1.ActorTemplateSpec) {
			s.Containers[0].Image, s.Containers[0].Ports = "oci:/images/none", nil
		}, code: codes.InvalidArgument, want: "exposes no port"},
		{name: "probe on a port the image does not serve traffic on", mutate: func(s *atev1.ActorTemplateSpec) {
			s.Containers[0].Ports, s.WakeupProbe.HttpGet.Port = nil, 9090
		}, code: codes.InvalidArgument, want: "wakeupProbe.httpGet.port 9090"},
		{name: "hook on a port the image does not expose", mutate: func(s *atev1.ActorTemplateSpec) {
			s.Containers[0].Ports = nil
			s.OnRestore = &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Path: "/ate/restored", Port: 9999}}
		}, code: codes.InvalidArgument, want: "onRestore.httpPost.port 9999 is not one of containers[0].ports [8080]"},
		{name: "missing image names the path", mutate: func(s *atev1.ActorTemplateSpec) { s.Containers[0].Image = "oci:/images/gone" },
			code: codes.InvalidArgument, want: "/images/gone"},
		{name: "unreadable registry", mutate: func(s *atev1.ActorTemplateSpec) { s.Containers[0].Image = "registry.example/app" },
			code: codes.Unavailable, want: "connection refused"},
		{name: "registry refuses the atespace's credentials", mutate: func(s *atev1.ActorTemplateSpec) { s.Containers[0].Image = "registry.example/private" },
			code: codes.InvalidArgument, want: "an operator gives atespace team registry credentials with --registry-credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.mutate(spec)
			err := imageDefaults(context.Background(), images, "team", spec)
			if tc.code == codes.OK {
				if err != nil {
					t.Fatal(err)
				}
				if got := spec.GetContainers()[0].GetPorts(); !slices.Equal(got, tc.wantPorts) {
					t.Fatalf("ports %v, want %v", got, tc.wantPorts)
				}
				return
			}
			st := status.Convert(toStatus(err))
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("imageDefaults = %v (%v), want %v containing %q", st.Message(), st.Code(), tc.code, tc.want)
			}
		})
	}
}

// An editor naming a host path outside the operator's image roots gets
// InvalidArgument saying so, the same for a path that exists and one that
// does not, and nothing is read.
func TestImageOutsideRoots(t *testing.T) {
	images := image.NewCache(t.TempDir(), nil, image.LocalRoots([]string{t.TempDir()}))
	var msgs []string
	for _, ref := range []string{"oci:/etc", "oci:/etc/ate-no-such-dir", "oci-archive:/etc/passwd", "oci-archive:/etc/ate-no-such-file"} {
		spec := validSpec()
		spec.Containers[0].Image = ref
		st := status.Convert(toStatus(imageDefaults(context.Background(), images, "team", spec)))
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "not under an image root") {
			t.Errorf("%s: %v, want InvalidArgument saying the path is not under an image root", ref, st)
			continue
		}
		_, path, _ := strings.Cut(ref, ":")
		msgs = append(msgs, strings.ReplaceAll(strings.ReplaceAll(st.Message(), ref, "REF"), path, "PATH"))
	}
	for _, m := range msgs[1:] {
		if m != msgs[0] {
			t.Errorf("answers differ with the path's existence:\n%s\n%s", m, msgs[0])
		}
	}
}
