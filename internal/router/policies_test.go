package router

import (
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/streams"
)

func TestPolicyOf(t *testing.T) {
	tests := []struct {
		name    string
		spec    *atev1.ActorTemplateSpec
		want    Policy
		wantErr bool
	}{
		{name: "nothing set", spec: &atev1.ActorTemplateSpec{}, want: Policy{}},
		{name: "timeouts", spec: &atev1.ActorTemplateSpec{RouteTimeoutSeconds: 30, StreamIdleTimeoutSeconds: 5},
			want: Policy{RouteTimeout: 30 * time.Second, StreamIdleTimeout: 5 * time.Second}},
		{name: "idle pause", spec: &atev1.ActorTemplateSpec{Idle: &atev1.IdlePolicy{After: "10m", Action: "pause"}},
			want: Policy{IdleAfter: 10 * time.Minute, IdleAction: checkpoint.Pause}},
		{name: "idle without action suspends", spec: &atev1.ActorTemplateSpec{Idle: &atev1.IdlePolicy{After: "2s"}},
			want: Policy{IdleAfter: 2 * time.Second, IdleAction: checkpoint.Suspend}},
		{name: "idle after 0 is off", spec: &atev1.ActorTemplateSpec{Idle: &atev1.IdlePolicy{After: "0", Action: "pause"}},
			want: Policy{}},
		{name: "bad duration", spec: &atev1.ActorTemplateSpec{RouteTimeoutSeconds: 9, Idle: &atev1.IdlePolicy{After: "soon"}},
			want: Policy{RouteTimeout: 9 * time.Second}, wantErr: true},
		{name: "streams", spec: &atev1.ActorTemplateSpec{Streams: &atev1.StreamPolicy{Idle: "ignore", WakeOn: "request"}},
			want: Policy{Streams: streams.Policy{IgnoreIdle: true, WakeOnRequest: true}}},
		{name: "bad streams", spec: &atev1.ActorTemplateSpec{RouteTimeoutSeconds: 9, Streams: &atev1.StreamPolicy{WakeOn: "never"}},
			want: Policy{RouteTimeout: 9 * time.Second}, wantErr: true},
		{name: "bad action", spec: &atev1.ActorTemplateSpec{Idle: &atev1.IdlePolicy{After: "1m", Action: "freeze"}},
			want: Policy{}, wantErr: true},
		{name: "ingress token", spec: &atev1.ActorTemplateSpec{Ingress: &atev1.IngressPolicy{Policy: "token"}},
			want: Policy{Ingress: auth.IngressToken}},
		{name: "ingress public", spec: &atev1.ActorTemplateSpec{Ingress: &atev1.IngressPolicy{Policy: "public"}},
			want: Policy{}},
		{name: "unknown ingress fails closed", spec: &atev1.ActorTemplateSpec{RouteTimeoutSeconds: 9,
			Ingress: &atev1.IngressPolicy{Policy: "oidc"}},
			want: Policy{RouteTimeout: 9 * time.Second, Ingress: auth.IngressToken}, wantErr: true},
		{name: "ingress kept beside a bad idle", spec: &atev1.ActorTemplateSpec{Idle: &atev1.IdlePolicy{After: "soon"},
			Ingress: &atev1.IngressPolicy{Policy: "token"}},
			want: Policy{Ingress: auth.IngressToken}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := policyOf(tt.spec)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("policyOf = %+v, %v; want %+v, error %t", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestControlResolverPolicy: targets carry their template's policy,
// fetched once per actor incarnation.
func TestControlResolverPolicy(t *testing.T) {
	fc := &fakeControl{
		actors: map[string]*atev1.Actor{
			"default/a": {Atespace: "default", Name: "a", Uid: "ua", Template: "slow", State: atev1.ActorState_RUNNING, Worker: "w1"},
			"default/b": {Atespace: "default", Name: "b", Uid: "ub", Template: "slow", State: atev1.ActorState_SUSPENDED},
		},
		workers: []*atev1.Worker{{Name: "w1", TunnelAddress: "10.0.0.1:7000"}},
		templates: map[string]*atev1.ActorTemplate{"default/slow": {Atespace: "default", Name: "slow", Uid: "t1",
			Spec: &atev1.ActorTemplateSpec{RouteTimeoutSeconds: 600, Idle: &atev1.IdlePolicy{After: "2s", Action: "pause"}}}},
	}
	r := NewControlResolver(newControlClient(t, fc), nil)
	want := Policy{RouteTimeout: 10 * time.Minute, IdleAfter: 2 * time.Second, IdleAction: checkpoint.Pause}
	a := names.ActorKey{Atespace: "default", Name: "a"}
	for range 3 {
		got, ok, err := r.Lookup(t.Context(), a)
		if err != nil || !ok || got.Policy != want {
			t.Fatalf("Lookup(a) = %+v, %t, %v; want policy %+v", got, ok, err, want)
		}
	}
	if n := fc.templateGets.Load(); n != 1 {
		t.Errorf("GetActorTemplate called %d times for one actor, want 1", n)
	}
	got, _, err := r.Resume(t.Context(), names.ActorKey{Atespace: "default", Name: "b"})
	if err != nil || got.Policy != want {
		t.Fatalf("Resume(b) = %+v, %v", got, err)
	}
	if n := fc.templateGets.Load(); n != 2 {
		t.Errorf("GetActorTemplate called %d times for two actors, want 2", n)
	}
}

// TestControlResolverPolicyAfterMove: an actor moved to another template
// (ate update actor --template) is routed by the new template's policy,
// fetched once, not by the one cached for its uid before the move.
func TestControlResolverPolicyAfterMove(t *testing.T) {
	fc := &fakeControl{
		actors: map[string]*atev1.Actor{
			"default/a": {Atespace: "default", Name: "a", Uid: "ua", Template: "v1", State: atev1.ActorState_RUNNING, Worker: "w1"},
		},
		workers: []*atev1.Worker{{Name: "w1", TunnelAddress: "10.0.0.1:7000"}},
		templates: map[string]*atev1.ActorTemplate{
			"default/v1": {Atespace: "default", Name: "v1", Uid: "t1", Spec: &atev1.ActorTemplateSpec{Idle: &atev1.IdlePolicy{After: "2s"}}},
			"default/v2": {Atespace: "default", Name: "v2", Uid: "t2", Spec: &atev1.ActorTemplateSpec{Idle: &atev1.IdlePolicy{After: "15s"}}},
		},
	}
	r := NewControlResolver(newControlClient(t, fc), nil)
	a := names.ActorKey{Atespace: "default", Name: "a"}
	lookup := func() Policy {
		t.Helper()
		got, ok, err := r.Lookup(t.Context(), a)
		if err != nil || !ok {
			t.Fatalf("Lookup(a) = %+v, %t, %v", got, ok, err)
		}
		return got.Policy
	}
	if p := lookup(); p.IdleAfter != 2*time.Second {
		t.Fatalf("before the move: idle after %v, want 2s", p.IdleAfter)
	}
	fc.mu.Lock()
	fc.actors["default/a"].Template = "v2"
	fc.mu.Unlock()
	for range 2 {
		if p := lookup(); p.IdleAfter != 15*time.Second {
			t.Fatalf("after the move: idle after %v, want v2's 15s", p.IdleAfter)
		}
	}
	if n := fc.templateGets.Load(); n != 2 {
		t.Errorf("GetActorTemplate called %d times for one move, want 2", n)
	}
}

func TestControlResolverAssigned(t *testing.T) {
	key := names.ActorKey{Atespace: "default", Name: "app"}
	for _, tt := range []struct {
		state  atev1.ActorState
		worker string
		want   bool
	}{
		{atev1.ActorState_SUSPENDED, "", false},
		{atev1.ActorState_RESUMING, "", false},
		{atev1.ActorState_RESUMING, "w1", true},
		{atev1.ActorState_RUNNING, "w1", true},
		{atev1.ActorState_SUSPENDING, "w1", false},
		{atev1.ActorState_PAUSED, "", false},
	} {
		t.Run(tt.state.String()+"/"+tt.worker, func(t *testing.T) {
			fc := &fakeControl{actors: map[string]*atev1.Actor{
				"default/app": {Atespace: "default", Name: "app", State: tt.state, Worker: tt.worker}}}
			got, err := NewControlResolver(newControlClient(t, fc), nil).Assigned(t.Context(), key)
			if err != nil || got != tt.want {
				t.Errorf("Assigned = %t, %v; want %t", got, err, tt.want)
			}
		})
	}
}

func TestControlResolverIdlerAndActivity(t *testing.T) {
	key := names.ActorKey{Atespace: "default", Name: "app"}
	fc := &fakeControl{}
	r := NewControlResolver(newControlClient(t, fc), nil)
	if err := r.Pause(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if err := r.Suspend(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	acts := []Activity{{Actor: key, Last: time.Now()}, {Actor: names.ActorKey{Atespace: "team", Name: "b"}, Last: time.Now()}}
	if err := r.RecordActivity(t.Context(), acts); err != nil {
		t.Fatal(err)
	}
	// Pauses and suspends are the router's idle actions: the API records them as IDLE.
	want := []string{"pause default/app IDLE", "suspend default/app IDLE", "activity default/app", "activity team/b"}
	if got := fc.callLog(); !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}

	fc.setPauseErr(status.Error(codes.Unimplemented, "unknown method PauseActor"))
	if err := r.Pause(t.Context(), key); !errors.Is(err, ErrPauseUnsupported) {
		t.Errorf("Pause against a server without it: %v, want ErrPauseUnsupported", err)
	}
	fc.setPauseErr(status.Error(codes.FailedPrecondition, "actor is SUSPENDED"))
	if err := r.Pause(t.Context(), key); errors.Is(err, ErrPauseUnsupported) || !errors.Is(err, ErrNotResumable) ||
		status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Pause of a suspended actor: %v, want ErrNotResumable wrapping FailedPrecondition", err)
	}
}
