package up

import (
	"context"
	"log/slog"

	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/egress"
	"substrate.dev/ate/internal/lifecycle"
)

// Default operator ceilings (docs/security.md, "Operator ceilings").
const (
	// DefaultMaxEvictionPriority is --max-eviction-priority's default:
	// a tenant may put its own actors first in line for eviction
	// (negative priorities) but not anyone else's before its own.
	DefaultMaxEvictionPriority = 0
	// DefaultMaxPinnedActors is --max-pinned-actors' default: a handful
	// of actors per atespace may be kept from eviction, a tenant cannot
	// pin the whole pool.
	DefaultMaxPinnedActors = 4
)

// CeilingsConfig is what the operator allows templates, per atespace
// where it says so (flags --egress-allow, --egress-deny,
// --max-eviction-priority[-for], --max-pinned-actors[-for]).
type CeilingsConfig struct {
	// EgressAllow and EgressDeny are prefixes or addresses
	// (egress.ParseCeiling): templates' egress stays within EgressAllow,
	// never reaching EgressDeny or egress.Restricted unless a more
	// specific EgressAllow prefix says so.
	EgressAllow, EgressDeny []string
	// MaxEvictionPriority is the highest eviction.priority a template may
	// set; MaxEvictionPriorityFor overrides it per atespace.
	MaxEvictionPriority    int
	MaxEvictionPriorityFor map[string]int
	// MaxPinnedActors is how many actors of an atespace evictable: false
	// keeps from eviction at once; MaxPinnedActorsFor overrides it per
	// atespace.
	MaxPinnedActors    int
	MaxPinnedActorsFor map[string]int
}

// egress returns the egress ceiling, with the addresses of the
// components at componentURLs (the record store's, the snapshot store's
// endpoint) denied unless the operator allows them; a nil c bounds
// nothing.
func (c *CeilingsConfig) egress(ctx context.Context, log *slog.Logger, componentURLs ...string) (*egress.Ceiling, error) {
	if c == nil {
		return nil, nil
	}
	ceil, err := egress.ParseCeiling(c.EgressAllow, c.EgressDeny)
	if err != nil {
		return nil, err
	}
	return ceil.WithComponents(egress.ComponentPrefixes(ctx, log, componentURLs...)), nil
}

// eviction returns the eviction limits; a nil c bounds nothing.
func (c *CeilingsConfig) eviction() lifecycle.EvictionLimits {
	if c == nil {
		return lifecycle.EvictionLimits{}
	}
	return lifecycle.EvictionLimits{
		MaxPriority: lifecycle.Limit{Set: true, Default: c.MaxEvictionPriority, ByAtespace: c.MaxEvictionPriorityFor},
		MaxPinned:   lifecycle.Limit{Set: true, Default: c.MaxPinnedActors, ByAtespace: c.MaxPinnedActorsFor},
	}
}

// apiCeilings is what the API server checks templates against, the
// components at componentURLs denied (egress).
func (c *CeilingsConfig) apiCeilings(ctx context.Context, log *slog.Logger, componentURLs ...string) (apiserver.Ceilings, error) {
	e, err := c.egress(ctx, log, componentURLs...)
	if err != nil {
		return apiserver.Ceilings{}, err
	}
	return apiserver.Ceilings{Egress: e, Eviction: c.eviction()}, nil
}
