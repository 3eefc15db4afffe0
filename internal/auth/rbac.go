package auth

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// Role is what a binding grants.
type Role string

// The roles (docs/security.md).
const (
	// RoleAdmin may do everything; bound in every atespace ("" or "*")
	// it also manages atespaces, nodes, workers and role bindings.
	RoleAdmin Role = "admin"
	// RoleEditor may create, change, suspend, resume, pause, delete, exec
	// into and copy files of actors and templates (and tags, alarms) in
	// its atespace, and everything a viewer may.
	RoleEditor Role = "editor"
	// RoleViewer may get, list and watch actors, templates, tags,
	// alarms, logs and events of its atespace.
	RoleViewer Role = "viewer"
)

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return r == RoleAdmin || r == RoleEditor || r == RoleViewer }

// AllAtespaces is the binding atespace that means every atespace ("" too).
const AllAtespaces = "*"

// ValidateBinding checks a binding's fields: a DNS-1123 name, a known
// role, an atespace that is a DNS-1123 label or ""/"*", at least one
// subject. The error wraps names.ErrInvalid.
func ValidateBinding(b *store.RoleBinding) error {
	if err := names.ValidateLabel("rolebinding", b.Name); err != nil {
		return err
	}
	if !Role(b.Role).Valid() {
		return fmt.Errorf("%w: rolebinding %s: role %q: want admin, editor or viewer", names.ErrInvalid, b.Name, b.Role)
	}
	if b.Atespace != "" && b.Atespace != AllAtespaces {
		if err := names.ValidateLabel("atespace", b.Atespace); err != nil {
			return err
		}
	}
	if len(b.Users)+len(b.Groups) == 0 {
		return fmt.Errorf("%w: rolebinding %s: no users or groups", names.ErrInvalid, b.Name)
	}
	for _, s := range append(slices.Clone(b.Users), b.Groups...) {
		if s == "" {
			return fmt.Errorf("%w: rolebinding %s: empty subject", names.ErrInvalid, b.Name)
		}
	}
	return nil
}

// BuiltinBindings are always in force: the group ate:admins (the admin
// token's) is admin everywhere.
func BuiltinBindings() []*store.RoleBinding {
	return []*store.RoleBinding{{Name: "ate-admins", Atespace: AllAtespaces, Role: string(RoleAdmin), Groups: []string{AdminsGroup}}}
}

// ReadPolicyFile reads --authorization-policy-file: a YAML list of
// bindings in the RoleBinding record's JSON field names, e.g.
//
//   - name: web-editors
//     atespace: web
//     role: editor
//     users: [alice]
//     groups: [devs]
//
// Every binding is validated; names must be unique within the file.
func ReadPolicyFile(path string) ([]*store.RoleBinding, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("authorization policy file: %w", err)
	}
	var list []*store.RoleBinding
	if err := yaml.UnmarshalStrict(data, &list); err != nil {
		return nil, fmt.Errorf("authorization policy file %s: %w", path, err)
	}
	seen := map[string]bool{}
	for i, b := range list {
		if b == nil {
			return nil, fmt.Errorf("authorization policy file %s: entry %d is empty", path, i+1)
		}
		if err := ValidateBinding(b); err != nil {
			return nil, fmt.Errorf("authorization policy file %s: entry %d: %w", path, i+1, err)
		}
		if seen[b.Name] {
			return nil, fmt.Errorf("authorization policy file %s: rolebinding %s repeated", path, b.Name)
		}
		seen[b.Name] = true
	}
	return list, nil
}

// Grants is what one user may do, computed from the bindings naming
// them or one of their groups.
type Grants struct {
	// ClusterAdmin: admin bound in every atespace.
	ClusterAdmin bool
	// all is the strongest role bound in every atespace; per the
	// strongest role per atespace.
	all Role
	per map[string]Role
}

func stronger(a, b Role) Role {
	rank := map[Role]int{"": 0, RoleViewer: 1, RoleEditor: 2, RoleAdmin: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// GrantsFor evaluates bindings for p (a user; a component has none).
func GrantsFor(p *Principal, bindings []*store.RoleBinding) Grants {
	g := Grants{per: map[string]Role{}}
	if p == nil || p.Component != nil {
		return g
	}
	for _, b := range bindings {
		if !slices.Contains(b.Users, p.Name) && !slices.ContainsFunc(b.Groups, func(x string) bool { return slices.Contains(p.Groups, x) }) {
			continue
		}
		r := Role(b.Role)
		if b.Atespace == "" || b.Atespace == AllAtespaces {
			g.all = stronger(g.all, r)
			if r == RoleAdmin {
				g.ClusterAdmin = true
			}
			continue
		}
		g.per[b.Atespace] = stronger(g.per[b.Atespace], r)
	}
	return g
}

// readable lists, sorted, the atespaces bound by name.
func (g Grants) readable() []string {
	out := make([]string, 0, len(g.per))
	for ns := range g.per {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

// Role is the strongest role the user holds in atespace ("" none).
func (g Grants) Role(atespace string) Role { return stronger(g.all, g.per[atespace]) }

// CanRead reports whether the user may see atespace at all.
func (g Grants) CanRead(atespace string) bool { return g.Role(atespace) != "" }

// CanWrite reports whether the user may change things in atespace.
func (g Grants) CanWrite(atespace string) bool {
	r := g.Role(atespace)
	return r == RoleEditor || r == RoleAdmin
}

// BindingSource is where the API-managed bindings live (the record store).
type BindingSource interface {
	ListRoleBindings(ctx context.Context) ([]*store.RoleBinding, error)
}

// bindingCacheTTL bounds how long a binding created or deleted through
// another API server replica takes to apply here; this replica's own
// changes apply at once (Invalidate).
const bindingCacheTTL = time.Second

// Policy is every binding in force: the built-in ones, the policy file's
// and the record store's (cached for bindingCacheTTL).
type Policy struct {
	fixed  []*store.RoleBinding
	source BindingSource
	now    func() time.Time

	mu      sync.Mutex
	cached  []*store.RoleBinding
	fetched time.Time
}

// NewPolicy returns the policy of the built-in bindings, file's and
// source's (nil: none).
func NewPolicy(file []*store.RoleBinding, source BindingSource) *Policy {
	return &Policy{fixed: append(BuiltinBindings(), file...), source: source, now: time.Now}
}

// Bindings returns every binding in force.
func (p *Policy) Bindings(ctx context.Context) ([]*store.RoleBinding, error) {
	if p.source == nil {
		return p.fixed, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cached == nil || p.now().Sub(p.fetched) >= bindingCacheTTL {
		list, err := p.source.ListRoleBindings(ctx)
		if err != nil {
			return nil, fmt.Errorf("read role bindings: %w", err)
		}
		p.cached = append(slices.Clone(p.fixed), list...)
		p.fetched = p.now()
	}
	return p.cached, nil
}

// Invalidate drops the cached bindings (this replica changed them).
func (p *Policy) Invalidate() {
	p.mu.Lock()
	p.cached = nil
	p.mu.Unlock()
}

// MayReach says whether principal who may call the actors of atespace
// through the router (an ingress policy of "token" accepting a user's
// bearer token, apiserver.IngressAuthorizer): any role that may read the
// atespace may, so a viewer reaches the actors whose API objects they
// see, as a kubectl viewer reaches a Service's endpoints. nil when it
// may; an error naming the principal otherwise, also when the bindings
// cannot be read (the router then refuses, as it must when in doubt).
// A component may not: the router's own identity opens nothing.
func (p *Policy) MayReach(ctx context.Context, who *Principal, atespace string) error {
	if who == nil || who.Component != nil {
		return fmt.Errorf("%s: only users reach actors with a bearer token", who)
	}
	bindings, err := p.Bindings(ctx)
	if err != nil {
		return err
	}
	if !GrantsFor(who, bindings).CanRead(atespace) {
		return fmt.Errorf("%s holds no role in atespace %s", who, atespace)
	}
	return nil
}
