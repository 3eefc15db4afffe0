// Package apidial connects components and the CLI to the API server,
// which may run as several replicas over one store. An --api value names
// them one of four ways:
//
//	host:port              one replica
//	a:7070,b:7070          several, listed
//	dns:///name:7070       every address name resolves to (re-resolved by
//	                       grpc-go's DNS resolver, so replicas added later
//	                       are found when a connection is re-established;
//	                       the API server's MaxConnectionAge makes that
//	                       happen about hourly, MaxConnectionAge below)
//	k8s:///svc.ns:grpc     the ready endpoints of Kubernetes Service svc in
//	                       namespace ns (optional: default the Pod's own,
//	                       else "default") at the port named grpc or
//	                       numbered (internal/k8s/resolver), followed
//	                       through its EndpointSlices: a replica is used as
//	                       soon as it is ready and no more once it is not
//
// Only k8s:/// targets need Kubernetes: the client is built from the
// kubeconfig (client-go's default loading rules: $KUBECONFIG,
// ~/.kube/config, else the in-cluster service account; WithKubeconfig
// picks a file and context) when such a target is dialled, never for the
// other forms. It needs, in the Service's namespace, list and watch on
// endpointslices (API group discovery.k8s.io) and get on services.
//
// Calls are balanced round-robin over the replicas, and idempotent calls
// that fail with UNAVAILABLE before a replica answered (a replica killed
// or stopping) are retried on another, by grpc-go's retry support driven
// by the service config, not by loops of ours. A replica that stands
// still costs a read at most about half a second: reads are hedged onto
// another replica, which is then preferred (hedge.go).
package apidial

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	k8sresolver "substrate.dev/ate/internal/k8s/resolver"
	"substrate.dev/ate/internal/tracing"
)

// MaxConnectionAge and MaxConnectionAgeGrace are what API servers set on
// their gRPC server (keepalive.ServerParameters): a client connection is
// closed gracefully after about an hour, so clients resolving by DNS
// reconnect and spread onto replicas added since, without the churn a short
// age costs (each reconnect is a TCP and HTTP/2 handshake, and a stream
// older than the age is ended after the grace).
const (
	MaxConnectionAge      = time.Hour
	MaxConnectionAgeGrace = 5 * time.Minute
)

// Keepalive: a connection on which the peer has sent nothing for
// keepaliveTime is pinged, and closed if the ping is not answered within
// keepaliveTimeout. Without it a replica that stands still (SIGSTOP, a
// frozen VM, a half-open TCP connection after a partition) held every
// call sent to it until the caller's own deadline; now the call fails
// UNAVAILABLE within 15 s and the retry policy sends it to another
// replica. 10 s is grpc-go's smallest client ping interval.
const (
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 5 * time.Second
)

// ServerOptions are the keepalive settings every server apidial clients
// call must use (API servers, node agents): they accept the clients'
// pings (grpc-go's default policy refuses pings more often than every
// 5 minutes and closes the connection) and age connections out
// (MaxConnectionAge). With tracing on (tracing.Enabled) they include
// otelgrpc's server stats handler; connections DialContext makes carry
// its client handler then.
func ServerOptions() []grpc.ServerOption {
	return append([]grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 2, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: MaxConnectionAge, MaxConnectionAgeGrace: MaxConnectionAgeGrace}),
	}, tracing.ServerOptions()...)
}

// idempotent are the Control calls that may run twice with the effect of
// once: reads, RecordActivity (moves last_activity forward only), and the
// state changes whose second call finds the state reached (resume of a
// RUNNING actor, suspend of a SUSPENDED one). Create, Update, Delete and
// Revert are not: a retry of a create that landed answers ALREADY_EXISTS.
var idempotent = []string{
	"GetAtespace", "ListAtespaces", "GetActorTemplate", "ListActorTemplates",
	"GetActor", "ListActors", "ListWorkers", "ListNodes", "RecordActivity",
	"ResumeActor", "SuspendActor", "PauseActor", "DrainNode", "RemoveNode",
}

// retryableCodes are retried: UNAVAILABLE is what a dead or stopping
// replica gives (and what the API server answers while its store is
// unreachable).
var retryableCodes = []string{"UNAVAILABLE"}

// serviceConfig is the gRPC service config every API connection uses
// (https://github.com/grpc/grpc/blob/master/doc/service_config.md and
// doc/retry.md, gRFC A6): round-robin over the resolved replicas,
// passing over those that stand still (hedge.go), and the
// retry policy for idempotent calls.
func serviceConfig() string {
	type name struct {
		Service string `json:"service"`
		Method  string `json:"method"`
	}
	var names []name
	for _, m := range idempotent {
		names = append(names, name{Service: "ate.v1.Control", Method: m})
	}
	cfg := map[string]any{
		"loadBalancingConfig": []any{map[string]any{balancerName: map[string]any{}}},
		"methodConfig": []any{map[string]any{
			"name": names,
			"retryPolicy": map[string]any{
				// Three: a replica that died and one more. A resume whose
				// actor fails to start answers UNAVAILABLE too, and is
				// tried again at most twice.
				"maxAttempts":          3,
				"initialBackoff":       "0.1s",
				"maxBackoff":           "1s",
				"backoffMultiplier":    2,
				"retryableStatusCodes": retryableCodes,
			},
		}},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		panic(err) // a constant structure
	}
	return string(b)
}

// Dial is DialContext with a background context: a k8s:/// target's
// start-up wait is still bounded, by its sync timeout (WithSyncTimeout).
func Dial(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return DialContext(context.Background(), target, opts...)
}

// DialContext returns a lazy connection to the replicas target names
// (package doc). Reconnects are tried at least every second: grpc-go's
// default backoff grows to 120 s, so a node found its restarted API
// server only after its loss deadline (5 s). opts come after ours
// (transport credentials are ours for now: every component listens
// without TLS); apidial's own options (WithKubeconfig, WithSyncTimeout,
// WithLogger) may be among them.
//
// A k8s:/// target is not lazy at start-up: DialContext waits, within
// ctx and the sync timeout (default 30 s), until the Service's
// EndpointSlices have been listed, so missing RBAC fails here, naming
// the permission to grant, instead of leaving a connection that is never
// ready. Errors: a malformed target, an unloadable kubeconfig, that
// start-up failure.
func DialContext(ctx context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if strings.HasPrefix(target, k8sresolver.Scheme+":///") {
		return dialK8s(ctx, target, opts)
	}
	t, extra, err := resolve(target)
	if err != nil {
		return nil, err
	}
	return newClient(target, t, extra, opts)
}

// newClient makes the connection for a resolved target t (grpc-go's form
// of target) with our options, extra (the resolver's), then opts.
func newClient(target, t string, extra, opts []grpc.DialOption) (*grpc.ClientConn, error) {
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig()),
		grpc.WithChainUnaryInterceptor(interceptorFor(target)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	base = append(base, tracing.DialOptions()...)
	conn, err := grpc.NewClient(t, append(append(base, extra...), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to API server %s: %w", target, err)
	}
	return conn, nil
}

// Split returns the replicas a listed target names, one per entry, and a
// one-element slice for a single address, a dns:/// or a k8s:/// name.
func Split(target string) ([]string, error) {
	if err := validate(target); err != nil {
		return nil, err
	}
	if strings.Contains(target, "://") {
		return []string{target}, nil
	}
	return strings.Split(target, ","), nil
}

// Replicas returns the address of every replica target names now: the
// entries of a list, the one address given, every address a dns:///
// name resolves to, or the ready endpoints of a k8s:/// Service
// (host:port each, sorted; opts as for DialContext, the others ignored).
// A node agent keeps a session with each replica (nodeagent.Agent), so
// it needs them all, not a balanced connection. Errors: a malformed
// target, a failed lookup.
func Replicas(ctx context.Context, target string, opts ...grpc.DialOption) ([]string, error) {
	addrs, err := Split(target)
	if err == nil && strings.HasPrefix(target, k8sresolver.Scheme+":///") {
		return k8sReplicas(ctx, target, opts)
	}
	if err != nil || !strings.HasPrefix(target, "dns:///") {
		return addrs, err
	}
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(target, "dns:///")) // validated by Split
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve API server replicas %s: %w", target, err)
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip, port))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// resolve turns target into a grpc-go target and the dial options its
// resolver needs: a list gets a manual resolver holding its addresses.
func resolve(target string) (string, []grpc.DialOption, error) {
	addrs, err := Split(target)
	if err != nil {
		return "", nil, err
	}
	if len(addrs) == 1 {
		return addrs[0], nil, nil
	}
	r := manual.NewBuilderWithScheme("ate-apis")
	state := resolver.State{}
	for _, a := range addrs {
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
	}
	r.InitialState(state)
	return r.Scheme() + ":///replicas", []grpc.DialOption{grpc.WithResolvers(r)}, nil
}

// ErrTarget is wrapped by every error about a malformed --api value.
var ErrTarget = errors.New("invalid API server address")

// validate checks target's shape so a typo fails at start-up with a
// message, not as a connection that never becomes ready.
func validate(target string) error {
	switch {
	case target == "":
		return fmt.Errorf("%w: empty (want host:port, a comma-separated list of them, dns:///name:port or k8s:///service.namespace:port)", ErrTarget)
	case strings.HasPrefix(target, k8sresolver.Scheme+":///"):
		if _, err := k8sresolver.ParseTarget(target); err != nil {
			return fmt.Errorf("%w: %w", ErrTarget, err)
		}
		return nil
	case strings.HasPrefix(target, "dns:///"):
		if _, _, err := net.SplitHostPort(strings.TrimPrefix(target, "dns:///")); err != nil {
			return fmt.Errorf("%w %q: %v (want dns:///name:port)", ErrTarget, target, err)
		}
		return nil
	case strings.Contains(target, "://"), strings.Contains(target, ":/"):
		return fmt.Errorf("%w %q: the only schemes understood are dns:/// and k8s:/// (else host:port, or a comma-separated list)", ErrTarget, target)
	}
	for _, a := range strings.Split(target, ",") {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return fmt.Errorf("%w %q: entry %q is not host:port", ErrTarget, target, a)
		}
	}
	return nil
}
