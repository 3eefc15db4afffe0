package apiserver

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/egress"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/store"
)

// An editor asks, in a template, for more than the operator's ceilings
// allow its atespace: egress to the cluster's private networks or to
// everything, a priority that sends other tenants' actors first, a pin.
// CreateActorTemplate refuses with InvalidArgument naming the field and
// the ceiling, and no template is stored.
func TestCeilingsRefuseTemplate(t *testing.T) {
	st, must := openBolt(t)
	ctx := context.Background()
	must(st.CreateAtespace(ctx, &store.Atespace{Name: "team"}))
	s := New(st, nil, "gvisor", nil, nil)
	ceil := Ceilings{
		Egress: egress.NewCeiling(egress.DefaultCeilingAllow, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28")}),
		Eviction: lifecycle.EvictionLimits{
			MaxPriority: lifecycle.Limit{Set: true, Default: 0, ByAtespace: map[string]int{"trusted": 10}},
			MaxPinned:   lifecycle.Limit{Set: true, Default: 0},
		},
	}
	s.SetCeilings(ceil)
	egressTo := func(cidr string) func(*atev1.ActorTemplateSpec) {
		return func(sp *atev1.ActorTemplateSpec) {
			sp.Network = &atev1.NetworkPolicy{Egress: []*atev1.EgressRule{{Cidr: "198.51.100.0/24"}, {Cidr: cidr, Ports: []int32{5432}}}}
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*atev1.ActorTemplateSpec)
		want   string
	}{
		{"everything", egressTo("0.0.0.0/0"), "network.egress[1].cidr: egress beyond the operator's ceiling: 0.0.0.0/0 includes 10.0.0.0/8"},
		{"a private network", egressTo("10.0.0.0/8"), "network.egress[1].cidr: egress beyond the operator's ceiling: 10.0.0.0/8 is in 10.0.0.0/8"},
		{"one private address", egressTo("192.168.1.10"), "192.168.1.10/32 is in 192.168.0.0/16"},
		{"shared address space", egressTo("100.100.0.0/16"), "is in 100.64.0.0/10"},
		{"an operator-denied range", egressTo("203.0.113.0/24"), "203.0.113.0/24 includes 203.0.113.0/28 (--egress-deny)"},
		{"priority above the ceiling", func(sp *atev1.ActorTemplateSpec) { sp.Eviction = &atev1.EvictionPolicy{Priority: 1} },
			"eviction.priority 1 is above 0, the highest atespace team may set"},
		{"a pin", func(sp *atev1.ActorTemplateSpec) { sp.Eviction = &atev1.EvictionPolicy{Evictable: new(false)} },
			"eviction.evictable false: atespace team may keep no actor from eviction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.mutate(spec)
			_, err := s.CreateActorTemplate(ctx, &atev1.CreateActorTemplateRequest{Template: &atev1.ActorTemplate{Atespace: "team", Name: "t", Spec: spec}})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CreateActorTemplate = %v, want InvalidArgument containing %q", err, tc.want)
			}
			if _, err := st.GetTemplate(ctx, "team", "t"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("refused template stored: %v", err)
			}
		})
	}

	// Within the ceilings: public prefixes, host names (checked per
	// connection), priorities at or below the atespace's ceiling.
	for _, tc := range []struct {
		atespace string
		mutate   func(*atev1.ActorTemplateSpec)
	}{
		{"team", egressTo("192.0.2.0/24")},
		{"team", func(sp *atev1.ActorTemplateSpec) {
			sp.Network = &atev1.NetworkPolicy{Egress: []*atev1.EgressRule{{Host: "api.example.com"}}}
		}},
		{"team", func(sp *atev1.ActorTemplateSpec) {
			sp.Eviction = &atev1.EvictionPolicy{Priority: -3, Evictable: new(true)}
		}},
		{"trusted", func(sp *atev1.ActorTemplateSpec) { sp.Eviction = &atev1.EvictionPolicy{Priority: 10} }},
	} {
		spec := validSpec()
		tc.mutate(spec)
		if err := ceil.check(tc.atespace, spec); err != nil {
			t.Errorf("%s %v: %v", tc.atespace, spec, err)
		}
	}
}
