package up

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"

	"substrate.dev/ate/internal/apidial"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/tracing"
)

// grpcMetrics is ms's gRPC metrics; nil (none) without metrics.
func grpcMetrics(ms *metrics.Metrics) *metrics.GRPC {
	if ms == nil {
		return nil
	}
	return ms.GRPC
}

// grpcServer returns a gRPC server with apidial's options (tracing
// included), ms's call metrics and opts; call initMetrics once its
// services are registered.
func grpcServer(ms *metrics.Metrics, opts ...grpc.ServerOption) (gs *grpc.Server, initMetrics func()) {
	g := grpcMetrics(ms)
	all := append(append(apidial.ServerOptions(), g.ServerOptions()...), opts...)
	gs = grpc.NewServer(all...)
	return gs, func() { g.InitServer(gs) }
}

// componentDialer returns how one component connects to another: a node
// to the API server replicas (the API server to a node agent: nodeDialer;
// apidial
// says how addresses are read and why reconnects are fast), over t's TLS
// to a server of component server (t nil: plaintext), counting calls in
// ms (nil: not).
func componentDialer(ms *metrics.Metrics, t *pki.Transport, server auth.Component) func(addr string) (*grpc.ClientConn, error) {
	g := grpcMetrics(ms)
	return func(addr string) (*grpc.ClientConn, error) {
		return apidial.Dial(addr, append(g.DialOptions(), t.DialOption(server))...)
	}
}

// nodeDialer is the API server's dialer of node agents: the agent at a
// node's address must present that node's certificate.
func nodeDialer(ms *metrics.Metrics, t *pki.Transport) func(node, addr string) (*grpc.ClientConn, error) {
	g := grpcMetrics(ms)
	return func(node, addr string) (*grpc.ClientConn, error) {
		return apidial.Dial(addr, append(g.DialOptions(), t.NodeDialOption(node))...)
	}
}

// inProcessDialOptions are the options of `ate up`'s router's connection
// to its own API server: tracing and ms's call metrics.
func inProcessDialOptions(ms *metrics.Metrics) []grpc.DialOption {
	return append(tracing.DialOptions(), grpcMetrics(ms).DialOptions()...)
}

// startTracing starts tracing for the process's component service
// (tracing.Start) and returns its flush, which logs a failure.
func startTracing(ctx context.Context, service string, log *slog.Logger) (func(), error) {
	shutdown, err := tracing.Start(ctx, service)
	if err != nil {
		return nil, err
	}
	if tracing.Enabled() {
		log.Info("tracing on", "service", service)
	}
	return func() {
		if err := shutdown(context.WithoutCancel(ctx)); err != nil {
			log.Warn("flush traces", "err", err)
		}
	}, nil
}

// observeCommits reports st's committed transactions to ms (when both
// can).
func observeCommits(st store.Store, ms *metrics.Metrics) {
	if o, ok := st.(store.CommitObserved); ok && ms != nil {
		o.SetCommitObserver(ms.Store)
	}
}
