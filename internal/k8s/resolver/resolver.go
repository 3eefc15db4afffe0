// Package resolver is a grpc-go name resolver (scheme "k8s") that follows
// a Kubernetes Service's ready endpoints through its EndpointSlices, so a
// client balancing round-robin spreads onto replicas the moment they
// become ready and stops using one the moment it is not ready or
// terminating, without reconnecting (DNS is re-resolved only when a
// connection breaks; docs/design/k8s-resolver.md).
//
// Targets are
//
//	k8s:///<service>[.<namespace>]:<port>
//
// where port is the Service port's name or number. The port dialled is
// the Pods' port behind it: the EndpointSlices' port of the same name,
// and for a number first the name of the Service port with that number
// (a Service port 443 with targetPort 7070 dials 7070). A target naming
// no namespace means the Pod's own namespace (InClusterNamespaceFile),
// else "default".
//
// RBAC needed in the Service's namespace: list and watch on
// endpointslices (API group discovery.k8s.io), and get on services when
// the port is given by number.
//
// The resolver sends addresses only; the caller picks the balancer
// (the round-robin of internal/apidial's balancer).
package resolver

import (
	"fmt"
	"sync"

	"google.golang.org/grpc/resolver"
	"k8s.io/client-go/kubernetes"
)

// Builder builds resolvers for k8s:/// targets over one Kubernetes
// client. Connections to the same target share one Watch (one informer),
// which stops when the last of them closes. Safe for concurrent use.
type Builder struct {
	cs   kubernetes.Interface
	opts Options

	mu      sync.Mutex
	watches map[Target]*shared // by target with namespace filled
}

// shared is a Watch and how many holders it has.
type shared struct {
	w    *Watch
	refs int
}

// NewBuilder returns a Builder whose watches use cs. Register it with
// grpc.WithResolvers (or resolver.Register).
func NewBuilder(cs kubernetes.Interface, opts Options) *Builder {
	return &Builder{cs: cs, opts: opts.withDefaults(), watches: map[Target]*shared{}}
}

// Scheme returns "k8s".
func (b *Builder) Scheme() string { return Scheme }

// Acquire returns the builder's watch of t, starting it if none runs,
// and the function that releases it: the watch stops (and the release
// waits for that) when its last holder releases it. A caller that wants
// to know at start-up that the endpoints can be listed acquires the
// watch, waits with WaitSynced, then dials; the connection's resolver
// reuses the synced watch.
func (b *Builder) Acquire(t Target) (*Watch, func()) {
	if t.Namespace == "" {
		t.Namespace = b.opts.Namespace
	}
	b.mu.Lock()
	s := b.watches[t]
	if s == nil {
		s = &shared{w: StartWatch(b.cs, t, b.opts)}
		b.watches[t] = s
	}
	s.refs++
	b.mu.Unlock()
	var once sync.Once
	return s.w, func() {
		once.Do(func() {
			b.mu.Lock()
			s.refs--
			last := s.refs == 0
			if last {
				delete(b.watches, t)
			}
			b.mu.Unlock()
			if last {
				s.w.Stop()
			}
		})
	}
}

// Build implements resolver.Builder: it starts (or joins) the watch of
// the target and returns at once; the connection gets the endpoints when
// the watch has synced, and every change after. Until then, and while
// the endpoints cannot be listed, the connection gets the error (RPCs
// fail UNAVAILABLE with it). Errors: a malformed target (ErrTarget).
func (b *Builder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	t, err := ParseTarget(target.Endpoint())
	if err != nil {
		return nil, err
	}
	w, release := b.Acquire(t)
	t = w.Target()
	unsubscribe := w.subscribe(func(u update) {
		switch {
		case u.err != nil:
			cc.ReportError(u.err)
		case len(u.addrs) == 0:
			// An empty state first: a resolver error alone would leave the
			// balancer on the endpoints it had.
			_ = cc.UpdateState(resolver.State{})
			cc.ReportError(fmt.Errorf("k8s resolver %s: service %s/%s has no ready endpoints for port %s", t, t.Namespace, t.Service, t.Port))
		default:
			eps := make([]resolver.Endpoint, 0, len(u.addrs))
			for _, a := range u.addrs {
				eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
			}
			// The error (ErrBadResolverState) only says the balancer
			// has nothing to connect to; the next change corrects it.
			_ = cc.UpdateState(resolver.State{Endpoints: eps})
		}
	})
	return &k8sResolver{close: func() { unsubscribe(); release() }}, nil
}

// k8sResolver is one connection's view of a Watch.
type k8sResolver struct {
	once  sync.Once
	close func()
}

// ResolveNow does nothing: the informer pushes every change as it is
// seen, so there is nothing to look up again.
func (*k8sResolver) ResolveNow(resolver.ResolveNowOptions) {}

// Close stops sending updates to the connection, and the watch if it has
// no other connection.
func (r *k8sResolver) Close() { r.once.Do(r.close) }
