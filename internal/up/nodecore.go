package up

import (
	"context"

	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/nodeagent"
	"substrate.dev/ate/internal/runner"
)

// nodeParts is the node as `ate node` and `ate up` both assemble it: the
// node agent, fenced until the registry welcomes it; its Agent, the
// node's half of the node protocol and the handler of everything the
// node reports; and the NodeAgent service over it. How the agent
// reaches the registry (AgentConfig.Dial, Replicas, Address) and where
// the service is served (a TCP listener, or nodeagent.InProcess) is the
// caller's.
type nodeParts struct {
	node    *node.Node
	agent   *nodeagent.Agent
	service *nodeagent.Server
}

// newNodeParts builds the node of nc (its dependencies set) and its
// agent of ac (its node, tunnel address, sandbox class and logger are
// nc's). Shut the node down when done.
func newNodeParts(ctx context.Context, nc node.Config, ac nodeagent.AgentConfig) (nodeParts, error) {
	// The node detaches its own background work (exit watchers) from
	// ctx and ends it at Shutdown.
	n, err := node.New(ctx, nc)
	if err != nil {
		return nodeParts{}, err
	}
	// Until the registry welcomes it, nothing it was not given is
	// served.
	n.Fence(true)
	ac.Node, ac.TunnelAddr, ac.SandboxClass, ac.Logger = n, nc.TunnelAddr, nc.SandboxClass, nc.Logger
	agent := nodeagent.NewAgent(ac)
	return nodeParts{node: n, agent: agent, service: nodeagent.NewServer(n, agent)}, nil
}

// add adds the node's own long-running parts to r: the actors'
// self-service endpoint and the registration (the agent's sessions,
// first's receiving the first one's outcome).
func (p nodeParts) add(r *runner.Runner, first chan<- error) {
	r.Add("self-service", func(ctx context.Context) error { return p.node.ServeSelfService(ctx) })
	r.Add("registration", func(ctx context.Context) error { return p.agent.Run(ctx, first) })
}
