package nodeagent

import (
	"context"
	"errors"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/tracing"
)

// InProcessAddress is the address an in-process node announces: the
// InProcess transport connects whatever address it is given to the one
// server it has.
const InProcessAddress = "in-process"

// InProcess carries the node protocol between an API server and a node
// in the same process (`ate up`): one gRPC server holding both halves —
// the NodeRegistry the node's Agent registers with and the NodeAgent the
// Registry's Remote calls — over an in-memory listener. So the embedded
// node goes through the same registration, heartbeats, loss deadline,
// fencing and drain as a node in a cluster; only the bytes do not leave
// the process. Nothing outside the process can reach it, so it carries
// no TLS: calls are unbound by a certificate, as in a plaintext
// installation (binding.go).
type InProcess struct {
	ln  *bufconn.Listener
	srv *grpc.Server

	// cut, while set, holds every write the node's side makes (Partition).
	mu   sync.Mutex
	cond *sync.Cond
	cut  bool
}

// inProcessBuffer is the in-memory connections' buffer per direction.
const inProcessBuffer = 1 << 20

// NewInProcess returns the transport; its Dial functions may be handed
// out at once, and connect once Serve runs.
func NewInProcess() *InProcess {
	// Traced as the protocol is between processes, so a node's spans
	// join the workflow's trace the same way (docs/observability.md).
	p := &InProcess{ln: bufconn.Listen(inProcessBuffer), srv: grpc.NewServer(tracing.ServerOptions()...)}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// Serve serves reg and the node's NodeAgent until ctx ends, then stops
// at once: the registry's sessions end with ctx too (Registry.Run), and
// the caller has finished the workflows that call the node. Call it
// once.
func (p *InProcess) Serve(ctx context.Context, reg *Registry, agent *Server) error {
	atev1.RegisterNodeRegistryServer(p.srv, reg)
	atev1.RegisterNodeAgentServer(p.srv, agent)
	stop := context.AfterFunc(ctx, func() {
		p.Partition(false) // release held writes, so the connections can close
		p.srv.Stop()
	})
	defer stop()
	err := p.srv.Serve(p.ln)
	if errors.Is(err, grpc.ErrServerStopped) || ctx.Err() != nil {
		return nil
	}
	return err
}

// DialRegistry is AgentConfig.Dial: the node's connection to the
// registry. Its writes are the ones Partition holds.
func (p *InProcess) DialRegistry(string) (*grpc.ClientConn, error) { return p.dial(true) }

// DialNode is RegistryConfig.Dial: the registry's connection to the
// node's NodeAgent.
func (p *InProcess) DialNode(_, _ string) (*grpc.ClientConn, error) { return p.dial(false) }

// Replicas is AgentConfig.Replicas: the one API server in the process.
func (p *InProcess) Replicas(context.Context) ([]string, error) {
	return []string{InProcessAddress}, nil
}

func (p *InProcess) dial(gated bool) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+InProcessAddress, append(tracing.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			c, err := p.ln.DialContext(ctx)
			if err != nil || !gated {
				return c, err
			}
			return &gatedConn{Conn: c, p: p}, nil
		}))...)
}

// Partition, while cut, holds everything the node sends to the registry
// (heartbeats, events, new sessions' hellos) without breaking a
// connection: what the registry sees of a node that stood still or was
// cut off from it, for fault tests. Partition(false) lets it all through.
func (p *InProcess) Partition(cut bool) {
	p.mu.Lock()
	p.cut = cut
	p.mu.Unlock()
	p.cond.Broadcast()
}

// gatedConn is the node's side of a connection to the registry: its
// writes wait while the transport is partitioned, or until it closes.
type gatedConn struct {
	net.Conn
	p      *InProcess
	closed bool // guarded by p.mu
}

func (c *gatedConn) Write(b []byte) (int, error) {
	c.p.mu.Lock()
	for c.p.cut && !c.closed {
		c.p.cond.Wait()
	}
	closed := c.closed
	c.p.mu.Unlock()
	if closed {
		return 0, net.ErrClosed
	}
	return c.Conn.Write(b)
}

func (c *gatedConn) Close() error {
	c.p.mu.Lock()
	c.closed = true
	c.p.mu.Unlock()
	c.p.cond.Broadcast()
	return c.Conn.Close()
}
