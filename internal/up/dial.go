package up

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"

	"substrate.dev/ate/internal/apidial"
)

// dialAPI connects a component to the API server replicas target names,
// any form apidial reads: a k8s:/// target waits (within ctx and
// apidial's sync bound) until its Service's EndpointSlices are listed,
// and its resolver logs to log.
func dialAPI(ctx context.Context, target string, log *slog.Logger, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return apidial.DialContext(ctx, target, append([]grpc.DialOption{apidial.WithLogger(log)}, opts...)...)
}
