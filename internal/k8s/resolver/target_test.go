package resolver

import (
	"errors"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Target
		bad  bool
	}{
		{in: "k8s:///ate-apiserver.ate-system:grpc", want: Target{Service: "ate-apiserver", Namespace: "ate-system", Port: "grpc"}},
		{in: "k8s:///api:443", want: Target{Service: "api", Port: "443"}},
		{in: "api.team:7070", want: Target{Service: "api", Namespace: "team", Port: "7070"}},
		{in: "k8s:///api", bad: true},
		{in: "k8s:///api.team:", bad: true},
		{in: "k8s:///api.team:0", bad: true},
		{in: "k8s:///api.team:70000", bad: true},
		{in: "k8s:///Api.team:grpc", bad: true},
		{in: "k8s:///api.team.svc.cluster.local:grpc", bad: true},
		{in: "k8s:///api.:grpc", bad: true},
		{in: "k8s:///api.team:not_a_port", bad: true},
	} {
		got, err := ParseTarget(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrTarget) {
				t.Errorf("ParseTarget(%q) = %+v, %v; want ErrTarget", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseTarget(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestReadyAddresses(t *testing.T) {
	grpcPort := []discoveryv1.EndpointPort{{Name: ptr("grpc"), Port: ptr[int32](7070)}, {Name: ptr("metrics"), Port: ptr[int32](9090)}}
	ep := func(addr string, ready, terminating *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready, Terminating: terminating}}
	}
	for _, tc := range []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		port   string
		want   []string
	}{
		{name: "none", want: []string{}},
		{
			name: "ready true and unset count, false and terminating do not",
			port: "grpc",
			slices: []*discoveryv1.EndpointSlice{{Ports: grpcPort, Endpoints: []discoveryv1.Endpoint{
				ep("10.0.0.1", ptr(true), nil),
				ep("10.0.0.2", nil, nil),
				ep("10.0.0.3", ptr(false), nil),
				ep("10.0.0.4", ptr(true), ptr(true)),
				ep("10.0.0.5", nil, ptr(false)),
			}}},
			want: []string{"10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.5:7070"},
		},
		{
			name: "an address in two slices is listed once, sorted",
			port: "grpc",
			slices: []*discoveryv1.EndpointSlice{
				{Ports: grpcPort, Endpoints: []discoveryv1.Endpoint{ep("10.0.0.9", nil, nil), ep("10.0.0.1", nil, nil)}},
				{Ports: grpcPort, Endpoints: []discoveryv1.Endpoint{ep("10.0.0.1", nil, nil)}},
			},
			want: []string{"10.0.0.1:7070", "10.0.0.9:7070"},
		},
		{
			name:   "the port is chosen by name",
			port:   "metrics",
			slices: []*discoveryv1.EndpointSlice{{Ports: grpcPort, Endpoints: []discoveryv1.Endpoint{ep("10.0.0.1", nil, nil)}}},
			want:   []string{"10.0.0.1:9090"},
		},
		{
			name:   "a slice without the port contributes nothing",
			port:   "grpc",
			slices: []*discoveryv1.EndpointSlice{{Ports: grpcPort[1:], Endpoints: []discoveryv1.Endpoint{ep("10.0.0.1", nil, nil)}}},
			want:   []string{},
		},
		{
			name: "an unnamed port matches the empty name; IPv6 is bracketed",
			port: "",
			slices: []*discoveryv1.EndpointSlice{{Ports: []discoveryv1.EndpointPort{{Port: ptr[int32](80)}},
				Endpoints: []discoveryv1.Endpoint{ep("fd00::1", nil, nil)}}},
			want: []string{"[fd00::1]:80"},
		},
	} {
		if got := ReadyAddresses(tc.slices, tc.port); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ReadyAddresses = %v, want %v", tc.name, got, tc.want)
		}
	}
}
