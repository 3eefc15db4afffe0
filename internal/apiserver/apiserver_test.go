package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

func validSpec() *atev1.ActorTemplateSpec {
	return &atev1.ActorTemplateSpec{
		Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/images/counter", Ports: []int32{8080},
			VolumeMounts: []*atev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Volumes:     []*atev1.Volume{{Name: "data"}},
		WakeupProbe: &atev1.Probe{HttpGet: &atev1.HTTPGetAction{Path: "/healthz", Port: 8080}},
	}
}

func TestValidateTemplateSpec(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*atev1.ActorTemplateSpec)
		want   string // substring of the error; "" means valid
	}{
		{"valid", func(*atev1.ActorTemplateSpec) {}, ""},
		{"no containers", func(s *atev1.ActorTemplateSpec) { s.Containers = nil }, "exactly one container"},
		{"bad image", func(s *atev1.ActorTemplateSpec) { s.Containers[0].Image = "dir:/x" }, "image"},
		{"bad port", func(s *atev1.ActorTemplateSpec) { s.Containers[0].Ports = []int32{70000} }, "not a TCP port"},
		{"bad env", func(s *atev1.ActorTemplateSpec) { s.Containers[0].Env = map[string]string{"A=B": "x"} }, "invalid variable name"},
		{"probe path", func(s *atev1.ActorTemplateSpec) { s.WakeupProbe.HttpGet.Path = "healthz" }, "must start with /"},
		{"other class", func(s *atev1.ActorTemplateSpec) { s.SandboxClass = "kata" }, "runs \"gvisor\""},
		{"unknown volume", func(s *atev1.ActorTemplateSpec) { s.Volumes = nil }, "no volume \"data\""},
		{"reserved mount", func(s *atev1.ActorTemplateSpec) { s.Containers[0].VolumeMounts[0].MountPath = "/run/ate" }, "reserved"},
		{"relative mount", func(s *atev1.ActorTemplateSpec) { s.Containers[0].VolumeMounts[0].MountPath = "data" }, "clean absolute path"},
		{"bad scope", func(s *atev1.ActorTemplateSpec) { s.SnapshotPolicy = &atev1.SnapshotPolicy{OnPause: "Memory"} }, "Full or Data"},
		{"suspend holds more", func(s *atev1.ActorTemplateSpec) {
			s.SnapshotPolicy = &atev1.SnapshotPolicy{OnPause: "Data", OnSuspend: "Full"}
		}, "must not hold more"},
		{"bad idle", func(s *atev1.ActorTemplateSpec) { s.Idle = &atev1.IdlePolicy{After: "soon"} }, "not a duration"},
		{"bad idle action", func(s *atev1.ActorTemplateSpec) { s.Idle = &atev1.IdlePolicy{After: "1m", Action: "kill"} }, "pause or suspend"},
		{"idle without action suspends", func(s *atev1.ActorTemplateSpec) { s.Idle = &atev1.IdlePolicy{After: "10m"} }, ""},
		{"negative timeout", func(s *atev1.ActorTemplateSpec) { s.RouteTimeoutSeconds = -1 }, "routeTimeoutSeconds"},
		{"ttl in days", func(s *atev1.ActorTemplateSpec) { s.Ttl = &atev1.TTLPolicy{DeleteAfterIdle: "14d"} }, ""},
		{"ttl 1s", func(s *atev1.ActorTemplateSpec) { s.Ttl = &atev1.TTLPolicy{DeleteAfterIdle: "1s"} }, ""},
		{"ttl absent", func(s *atev1.ActorTemplateSpec) { s.Ttl = &atev1.TTLPolicy{} }, ""},
		{"ttl too short", func(s *atev1.ActorTemplateSpec) { s.Ttl = &atev1.TTLPolicy{DeleteAfterIdle: "500ms"} }, `ttl.deleteAfterIdle "500ms": must be at least 1s`},
		{"ttl zero", func(s *atev1.ActorTemplateSpec) { s.Ttl = &atev1.TTLPolicy{DeleteAfterIdle: "0s"} }, "or absent: never"},
		{"ttl garbage", func(s *atev1.ActorTemplateSpec) { s.Ttl = &atev1.TTLPolicy{DeleteAfterIdle: "two weeks"} }, `want a Go duration ("36h") or whole days ("14d")`},
		{"probe off the traffic port", func(s *atev1.ActorTemplateSpec) { s.Containers[0].Ports = []int32{9090} }, "wakeupProbe.httpGet.port 8080 is not the port traffic goes to"},
		{"probe skipped after a restore", func(s *atev1.ActorTemplateSpec) { s.WakeupProbe.AfterRestore = "skip" }, ""},
		{"TCP probe skipped after a restore", func(s *atev1.ActorTemplateSpec) {
			s.WakeupProbe = &atev1.Probe{AfterRestore: "skip"}
		}, ""},
		{"probe after a restore", func(s *atev1.ActorTemplateSpec) { s.WakeupProbe.AfterRestore = "probe" }, ""},
		{"bad probe afterRestore", func(s *atev1.ActorTemplateSpec) { s.WakeupProbe.AfterRestore = "Skip" }, `wakeupProbe.afterRestore "Skip": want probe (the default) or skip`},
		{"probe on a second port", func(s *atev1.ActorTemplateSpec) { s.Containers[0].Ports = []int32{9090, 8080} }, "containers[0].ports[0] = 9090"},
		{"eviction", func(s *atev1.ActorTemplateSpec) {
			s.Eviction = &atev1.EvictionPolicy{Evictable: proto.Bool(false), Priority: -3, MinRunSeconds: proto.Int32(0), AllowOpenStreams: true}
		}, ""},
		{"negative min run", func(s *atev1.ActorTemplateSpec) {
			s.Eviction = &atev1.EvictionPolicy{MinRunSeconds: proto.Int32(-1)}
		}, "eviction.minRunSeconds"},
		{"streams policy", func(s *atev1.ActorTemplateSpec) { s.Streams = &atev1.StreamPolicy{Idle: "ignore", WakeOn: "request"} }, ""},
		{"bad streams.idle", func(s *atev1.ActorTemplateSpec) { s.Streams = &atev1.StreamPolicy{Idle: "skip"} }, `streams.idle "skip": want count or ignore`},
		{"bad streams.wakeOn", func(s *atev1.ActorTemplateSpec) { s.Streams = &atev1.StreamPolicy{WakeOn: "never"} }, `streams.wakeOn "never": want any or request`},
		{"ingress token", func(s *atev1.ActorTemplateSpec) { s.Ingress = &atev1.IngressPolicy{Policy: "token"} }, ""},
		{"ingress public", func(s *atev1.ActorTemplateSpec) { s.Ingress = &atev1.IngressPolicy{Policy: "public"} }, ""},
		{"ingress empty", func(s *atev1.ActorTemplateSpec) { s.Ingress = &atev1.IngressPolicy{} }, ""},
		{"bad ingress", func(s *atev1.ActorTemplateSpec) { s.Ingress = &atev1.IngressPolicy{Policy: "oidc"} }, `ingress.policy "oidc": want "public" (the default) or "token"`},
		{"priority out of range", func(s *atev1.ActorTemplateSpec) { s.Eviction = &atev1.EvictionPolicy{Priority: 10000} }, "eviction.priority"},
		{"restore hook", func(s *atev1.ActorTemplateSpec) {
			s.OnRestore = &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Path: "/ate/restored", Port: 8080}, TimeoutSeconds: 300}
			s.NewActors = "golden"
		}, ""},
		{"cold boot", func(s *atev1.ActorTemplateSpec) { s.NewActors = "coldBoot" }, ""},
		{"bad newActors", func(s *atev1.ActorTemplateSpec) { s.NewActors = "cold" }, `newActors must be golden or coldBoot, got "cold"`},
		{"hook without httpPost", func(s *atev1.ActorTemplateSpec) { s.OnRestore = &atev1.RestoreHook{TimeoutSeconds: 5} }, "onRestore.httpPost is required"},
		{"hook path", func(s *atev1.ActorTemplateSpec) {
			s.OnRestore = &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Path: "restored", Port: 8080}}
		}, `onRestore.httpPost.path "restored" must start with /`},
		{"hook empty path", func(s *atev1.ActorTemplateSpec) {
			s.OnRestore = &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Port: 8080}}
		}, `onRestore.httpPost.path "" must start with /`},
		{"hook port", func(s *atev1.ActorTemplateSpec) {
			s.OnRestore = &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Path: "/r", Port: 0}}
		}, "onRestore.httpPost.port 0 is not a TCP port"},
		{"hook port not listed", func(s *atev1.ActorTemplateSpec) {
			s.OnRestore = &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Path: "/r", Port: 9999}}
		}, "onRestore.httpPost.port 9999 is not one of containers[0].ports [8080]"},
		{"hook second listed port", func(s *atev1.ActorTemplateSpec) {
			s.Containers[0].Ports = []int32{8080, 9090}
			s.OnRestore = &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Path: "/r", Port: 9090}}
		}, ""},
		{"hook port, no listed ports", func(s *atev1.ActorTemplateSpec) {
			s.Containers[0].Ports, s.WakeupProbe = nil, nil
			s.OnRestore = &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Path: "/r", Port: 9999}}
		}, ""},
		{"hook timeout", func(s *atev1.ActorTemplateSpec) {
			s.OnRestore = &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Path: "/r", Port: 8080}, TimeoutSeconds: 301}
		}, "onRestore.timeoutSeconds must be 0..300"},
		{"negative hook timeout", func(s *atev1.ActorTemplateSpec) {
			s.OnRestore = &atev1.RestoreHook{HttpPost: &atev1.HTTPPostAction{Path: "/r", Port: 8080}, TimeoutSeconds: -1}
		}, "onRestore.timeoutSeconds must be 0..300"},
		{"egress allow-list", func(s *atev1.ActorTemplateSpec) {
			s.Network = &atev1.NetworkPolicy{Egress: []*atev1.EgressRule{{Cidr: "10.0.0.0/8", Ports: []int32{443}}, {Host: "api.example.com"}}}
		}, ""},
		{"egress cidr and host", func(s *atev1.ActorTemplateSpec) {
			s.Network = &atev1.NetworkPolicy{Egress: []*atev1.EgressRule{{Cidr: "10.0.0.0/8", Host: "a.example"}}}
		}, "network.egress[0]: set cidr or host, not both"},
		{"egress port", func(s *atev1.ActorTemplateSpec) {
			s.Network = &atev1.NetworkPolicy{Egress: []*atev1.EgressRule{{Cidr: "10.0.0.0/8", Ports: []int32{70000}}}}
		}, "network.egress[0].ports: 70000 is not a TCP port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.mutate(spec)
			err := validateTemplateSpec(spec, "gvisor")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid spec rejected: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if status.Code(toStatus(err)) != codes.InvalidArgument {
				t.Fatalf("%v maps to %v, want InvalidArgument", err, status.Code(toStatus(err)))
			}
		})
	}
}

func TestToStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("x: %w", names.ErrInvalid), codes.InvalidArgument},
		{fmt.Errorf("actor: %w", store.ErrNotFound), codes.NotFound},
		{store.ErrAlreadyExists, codes.AlreadyExists},
		{store.ErrConflict, codes.Aborted},
		{fmt.Errorf("lease actor/a: %w", store.ErrFenced), codes.Aborted},
		{fmt.Errorf("copy volume data: v01: %w", snapshot.ErrTreeChanged), codes.Aborted},
		{fmt.Errorf("%w: postgres at 127.0.0.1:1: %w", store.ErrUnavailable, context.DeadlineExceeded), codes.Unavailable},
		{store.ErrNotEmpty, codes.FailedPrecondition},
		{lifecycle.ErrFailedPrecondition, codes.FailedPrecondition},
		{lifecycle.ErrNoCapacity, codes.ResourceExhausted},
		{fmt.Errorf("%w: boom", lifecycle.ErrResumeFailed), codes.Unavailable},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{errors.New("surprise"), codes.Internal},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			st := status.Convert(toStatus(tc.err))
			if st.Code() != tc.want || st.Message() != tc.err.Error() {
				t.Fatalf("toStatus(%v) = %v %q, want %v", tc.err, st.Code(), st.Message(), tc.want)
			}
			var info *errdetails.ErrorInfo
			for _, d := range st.Details() {
				if i, ok := d.(*errdetails.ErrorInfo); ok {
					info = i
				}
			}
			if info == nil || info.GetDomain() != atev1.ErrorDomain || info.GetReason() == "" {
				t.Fatalf("status lacks the ErrorInfo that marks it as the server's: %v", st.Details())
			}
		})
	}
}

// TestPutAwayReason: a client may say why it suspends or pauses (by
// request, or idle as the router does) but never claim the system's own
// reasons.
func TestUpdateActorTemplateArguments(t *testing.T) {
	s := &Server{}
	for _, tc := range []struct {
		name string
		req  *atev1.UpdateActorRequest
		want string
	}{
		{"both", &atev1.UpdateActorRequest{Atespace: "default", Name: "a", Template: "t2", WorkerSelector: map[string]string{"k": "v"}}, "not both"},
		{"bad template", &atev1.UpdateActorRequest{Atespace: "default", Name: "a", Template: "T_2"}, "DNS-1123"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.UpdateActor(context.Background(), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("UpdateActor = %v, want InvalidArgument containing %q", err, tc.want)
			}
		})
	}
}

func TestPutAwayReason(t *testing.T) {
	s := &Server{}
	for _, r := range []atev1.CheckpointReason{atev1.CheckpointReason_EVICTED, atev1.CheckpointReason_SELF_REQUESTED, 42} {
		_, err := s.SuspendActor(context.Background(), &atev1.SuspendActorRequest{Atespace: "default", Name: "a", Reason: r})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "REQUESTED or IDLE") {
			t.Errorf("SuspendActor reason %v = %v, want InvalidArgument naming the allowed reasons", r, err)
		}
		_, err = s.PauseActor(context.Background(), &atev1.PauseActorRequest{Atespace: "default", Name: "a", Reason: r})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("PauseActor reason %v = %v, want InvalidArgument", r, err)
		}
	}
}
