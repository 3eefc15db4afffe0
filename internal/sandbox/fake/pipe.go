package fake

import (
	"context"
	"net"
	"sync"
)

// pipeListener is a net.Listener whose connections are in-memory pipes
// (net.Pipe) handed over by dial. A container serves on one, so starting
// a fake sandbox binds no socket: binding 127.0.0.1:0 per start was what
// bounded BenchmarkWakeups at 64 clients (ephemeral-port search in the
// kernel once thousands of closed connections sat in TIME_WAIT), which
// is a cost of the fake, not of the control plane it exists to measure.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept implements net.Listener; after Close it returns net.ErrClosed.
func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener; it is idempotent.
func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr implements net.Listener.
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial returns the client end of a new pipe whose server end the listener
// accepts. It fails with net.ErrClosed once the listener is closed, or
// with ctx's error.
func (l *pipeListener) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		err := net.ErrClosed
		client.Close()
		server.Close()
		return nil, err
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "fake" }
