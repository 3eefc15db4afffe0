package apiserver

import (
	"fmt"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/egress"
	"substrate.dev/ate/internal/lifecycle"
)

// Ceilings are the operator's bounds on what a template may ask for,
// where its effects reach beyond its own atespace (docs/security.md,
// "Operator ceilings"). Templates asking more are refused at creation
// with InvalidArgument naming the field and the ceiling; the node and the
// lifecycle enforce the same bounds again at run time. The zero value
// bounds nothing.
type Ceilings struct {
	// Egress bounds network.egress cidr rules (egress.Ceiling).
	Egress *egress.Ceiling
	// Eviction bounds eviction.priority and evictable: false.
	Eviction lifecycle.EvictionLimits
}

// SetCeilings sets the operator's ceilings. Call it before serving.
func (s *Server) SetCeilings(c Ceilings) { s.ceilings = c }

// check refuses a spec of atespace asking more than c allows.
// spec has passed validateTemplateSpec.
func (c Ceilings) check(atespace string, spec *atev1.ActorTemplateSpec) error {
	p, err := egress.FromProto(spec.GetNetwork())
	if err != nil {
		return fmt.Errorf("%w: %w", errInvalid, err)
	}
	if err := c.Egress.CheckPolicy(p); err != nil {
		return fmt.Errorf("%w: %w", errInvalid, err)
	}
	if err := c.Eviction.Check(atespace, spec.GetEviction()); err != nil {
		return fmt.Errorf("%w: %w", errInvalid, err)
	}
	return nil
}
