package lifecycle

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/nodeapi"
)

// ErrBeyondLimit marks a template asking more than the operator's
// eviction limits allow its atespace (EvictionLimits.Check).
var ErrBeyondLimit = errors.New("beyond the operator's eviction limits")

// Limit is an operator's bound per atespace: ByAtespace[atespace], else
// Default. The zero Limit bounds nothing.
type Limit struct {
	Set        bool
	Default    int
	ByAtespace map[string]int
}

// For returns atespace's bound and whether there is one.
func (l Limit) For(atespace string) (int, bool) {
	if !l.Set {
		return 0, false
	}
	if n, ok := l.ByAtespace[atespace]; ok {
		return n, true
	}
	return l.Default, true
}

// EvictionLimits are the operator's bounds on what a template's eviction
// policy may claim, since its effects fall on other tenants: a higher
// priority makes everyone else's actors go first, and every pinned
// (evictable: false) actor holds a worker no waiting actor can have.
// The zero value bounds nothing (tests); the commands always set both.
type EvictionLimits struct {
	// MaxPriority is the highest eviction.priority an atespace's
	// templates may set (--max-eviction-priority). Lower priorities, which
	// only put the tenant's own actors first in line, are never bounded.
	MaxPriority Limit
	// MaxPinned is how many of an atespace's RUNNING actors evictable:
	// false protects at once (--max-pinned-actors); 0 refuses the setting.
	MaxPinned Limit
}

// Check refuses, with an error wrapping ErrBeyondLimit that names the
// field and the limit, a template policy p of atespace that asks more
// than l allows: a priority above the ceiling, or evictable: false where
// no actor may be pinned. It is what the API server says at template
// creation; eviction also clamps, for templates created before a limit
// was lowered.
func (l EvictionLimits) Check(atespace string, p *atev1.EvictionPolicy) error {
	if max, ok := l.MaxPriority.For(atespace); ok && int(p.GetPriority()) > max {
		return fmt.Errorf("%w: eviction.priority %d is above %d, the highest atespace %s may set (the operator's --max-eviction-priority)",
			ErrBeyondLimit, p.GetPriority(), max, atespace)
	}
	if max, ok := l.MaxPinned.For(atespace); ok && max <= 0 && pinned(p) {
		return fmt.Errorf("%w: eviction.evictable false: atespace %s may keep no actor from eviction (the operator's --max-pinned-actors)",
			ErrBeyondLimit, atespace)
	}
	return nil
}

// SetEvictionLimits sets the operator's eviction limits. Call it before
// the manager is used.
func (m *Manager) SetEvictionLimits(l EvictionLimits) { m.evictLimits = l }

// priority is p's priority, clamped to atespace's ceiling.
func (l EvictionLimits) priority(atespace string, p *atev1.EvictionPolicy) int32 {
	pr := p.GetPriority()
	if max, ok := l.MaxPriority.For(atespace); ok && int(pr) > max {
		return int32(max)
	}
	return pr
}

func pinned(p *atev1.EvictionPolicy) bool { return p != nil && p.Evictable != nil && !p.GetEvictable() }

// heldByMinRun: p's minRunSeconds, longer than DefaultMinRun, is what
// protects the actor now (it has answered nothing, and the default would
// have let it go). That is a pin too: else a tenant could hold workers
// for up to a day each, past the cap, by resuming actors of a template
// with a long minRunSeconds and never sending them a request.
func heldByMinRun(p *atev1.EvictionPolicy, act nodeapi.Activity, now time.Time) bool {
	if p == nil || p.MinRunSeconds == nil || act.Served > 0 {
		return false
	}
	minRun := time.Duration(p.GetMinRunSeconds()) * time.Second
	ran := now.Sub(act.Started)
	return minRun > DefaultMinRun && ran >= DefaultMinRun && ran < minRun
}

// unpinned is p without what the pin cap bounds: evictable: false and a
// minRunSeconds longer than DefaultMinRun.
func unpinned(p *atev1.EvictionPolicy) *atev1.EvictionPolicy {
	q := proto.CloneOf(p)
	q.Evictable = nil
	if q.MinRunSeconds != nil && time.Duration(q.GetMinRunSeconds())*time.Second > DefaultMinRun {
		q.MinRunSeconds = nil
	}
	return q
}

// pinnedActor is a RUNNING actor whose template says evictable: false.
type pinnedActor struct {
	c candidate
	// eligible: evictable but for the pin.
	eligible bool
}

// overPinCap returns the pinned actors of one atespace that the cap
// leaves unprotected and that may be evicted now: the most recently
// active max keep their protection, whether or not they are eligible.
func overPinCap(ps []pinnedActor, max int) []candidate {
	if len(ps) <= max {
		return nil
	}
	slices.SortFunc(ps, func(x, y pinnedActor) int { return y.c.last.Compare(x.c.last) })
	var out []candidate
	for _, p := range ps[max:] {
		if p.eligible {
			p.c.policy = unpinned(p.c.policy)
			out = append(out, p.c)
		}
	}
	return out
}
