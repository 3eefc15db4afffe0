package up

import (
	"google.golang.org/grpc"

	"substrate.dev/ate/internal/apidial"
)

// dialComponent connects one component to another: a node or router to
// the API server replicas, the API server to a node agent (apidial says
// how addresses are read and why reconnects are fast).
func dialComponent(addr string) (*grpc.ClientConn, error) { return apidial.Dial(addr) }
