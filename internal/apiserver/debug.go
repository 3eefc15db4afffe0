package apiserver

import (
	"context"
	"fmt"
	"io/fs"

	"google.golang.org/grpc"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/execio"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
)

// runningActor returns the RUNNING actor key names and the node hosting
// it. An actor in any other state is refused (FAILED_PRECONDITION): exec
// and cp never resume one, since a debugging command should not be what
// changes the state it looks at, nor take a worker from a real request.
func (s *Server) runningActor(ctx context.Context, atespace, name string) (*store.Actor, nodeapi.Node, error) {
	key := names.ActorKey{Atespace: atespace, Name: name}
	if err := key.Validate(); err != nil {
		return nil, nil, err
	}
	a, err := s.store.GetActor(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	if a.State != store.Running {
		return nil, nil, fmt.Errorf("%w: actor %s is %s, not RUNNING; resume it first (`ate resume actor %s`)",
			lifecycle.ErrFailedPrecondition, key, a.State, name)
	}
	n, err := s.lc.NodeOf(a.Worker)
	if err != nil {
		return nil, nil, err
	}
	return a, n, nil
}

// ExecActor implements atev1.ControlServer.
func (s *Server) ExecActor(stream grpc.BidiStreamingServer[atev1.ExecActorRequest, atev1.ExecActorResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return toStatus(fmt.Errorf("%w: the first ExecActor request must carry start", errInvalid))
	}
	if len(start.GetCommand()) == 0 {
		return toStatus(fmt.Errorf("%w: no command to run", errInvalid))
	}
	a, n, err := s.runningActor(ctx, start.GetAtespace(), start.GetName())
	if err != nil {
		return toStatus(err)
	}
	p := execio.Serve(start, stream.Recv, stream.Send)
	code, err := n.Exec(ctx, nodeapi.ExecRequest{Worker: a.Worker, ActorUID: a.UID, Process: p})
	if err != nil {
		return toStatus(err)
	}
	return stream.Send(&atev1.ExecActorResponse{Msg: &atev1.ExecActorResponse_ExitCode{ExitCode: int32(code)}})
}

// CopyToActor implements atev1.ControlServer.
func (s *Server) CopyToActor(stream grpc.ClientStreamingServer[atev1.CopyToActorRequest, atev1.CopyToActorResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	t := first.GetTarget()
	if t == nil {
		return toStatus(fmt.Errorf("%w: the first CopyToActor request must carry target", errInvalid))
	}
	a, n, err := s.runningActor(ctx, t.GetAtespace(), t.GetName())
	if err != nil {
		return toStatus(err)
	}
	r := execio.NewRecvReader(func() ([]byte, error) {
		m, err := stream.Recv()
		return m.GetData(), err
	})
	size, err := n.CopyIn(ctx, a.Worker, a.UID, t.GetPath(), fs.FileMode(t.GetMode()), r)
	if err != nil {
		return toStatus(err)
	}
	return stream.SendAndClose(&atev1.CopyToActorResponse{Size: size})
}

// CopyFromActor implements atev1.ControlServer.
func (s *Server) CopyFromActor(req *atev1.CopyFromActorRequest, stream grpc.ServerStreamingServer[atev1.CopyFromActorResponse]) error {
	ctx := stream.Context()
	t := req.GetTarget()
	a, n, err := s.runningActor(ctx, t.GetAtespace(), t.GetName())
	if err != nil {
		return toStatus(err)
	}
	w := execio.ChunkWriter(func(b []byte) error { return stream.Send(&atev1.CopyFromActorResponse{Data: b}) })
	if _, err := n.CopyOut(ctx, a.Worker, a.UID, t.GetPath(), w); err != nil {
		return toStatus(err)
	}
	return nil
}
