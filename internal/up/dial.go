package up

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// dialComponent connects one component to another (a node or router to
// the API server, the API server to a node agent). grpc-go's default
// reconnect backoff grows to 120 s, so after an outage of a minute a node
// found its restarted API server only after the loss deadline (5 s) and
// its actors were declared lost; here a reconnect is tried at least every
// second.
func dialComponent(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}))
}
