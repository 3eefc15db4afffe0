package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"google.golang.org/grpc"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/execio"
	"substrate.dev/ate/internal/nodeapi"
)

// The node protocol's side of `ate exec` and `ate cp`: the API server's
// Remote opens a stream to the node hosting the actor and relays what its
// own Control stream carries; the Server runs it on the nodeapi.Node it
// serves.

var _ nodeapi.Node = (*Remote)(nil)

// Exec implements nodeapi.Node over NodeAgent.ExecActor.
func (r *Remote) Exec(ctx context.Context, req nodeapi.ExecRequest) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := r.client.ExecActor(ctx)
	if err != nil {
		return 0, fromStatus(r.name, err)
	}
	p := req.Process
	start := &atev1.ExecStart{Command: p.Args, Env: p.Env, WorkingDir: p.Cwd, Tty: p.TTY, Stdin: p.Stdin != nil}
	if err := stream.Send(&atev1.NodeExecRequest{Worker: req.Worker, ActorUid: req.ActorUID,
		Req: &atev1.ExecActorRequest{Msg: &atev1.ExecActorRequest_Start{Start: start}}}); err != nil {
		return 0, fromStatus(r.name, err)
	}
	send := func(m *atev1.ExecActorRequest) error { return stream.Send(&atev1.NodeExecRequest{Req: m}) }
	code, err := execio.Call(ctx, send, stream.Recv, p.Stdin, p.Resize, p.Stdout, p.Stderr)
	return code, fromStatus(r.name, err)
}

// CopyIn implements nodeapi.Node over NodeAgent.CopyToActor.
func (r *Remote) CopyIn(ctx context.Context, worker, actorUID, path string, mode fs.FileMode, src io.Reader) (int64, error) {
	stream, err := r.client.CopyToActor(ctx)
	if err != nil {
		return 0, fromStatus(r.name, err)
	}
	err = stream.Send(&atev1.NodeCopyToRequest{Worker: worker, ActorUid: actorUID,
		Req: &atev1.CopyToActorRequest{Msg: &atev1.CopyToActorRequest_Target{Target: &atev1.CopyTarget{Path: path, Mode: uint32(mode)}}}})
	if err == nil {
		err = execio.SendChunks(src, func(b []byte) error {
			return stream.Send(&atev1.NodeCopyToRequest{Req: &atev1.CopyToActorRequest{Msg: &atev1.CopyToActorRequest_Data{Data: b}}})
		})
	}
	if errors.Is(err, io.EOF) {
		err = nil // the node ended the call; its status comes with CloseAndRecv
	}
	if err != nil {
		return 0, fromStatus(r.name, err)
	}
	resp, err := stream.CloseAndRecv()
	return resp.GetSize(), fromStatus(r.name, err)
}

// CopyOut implements nodeapi.Node over NodeAgent.CopyFromActor.
func (r *Remote) CopyOut(ctx context.Context, worker, actorUID, path string, w io.Writer) (int64, error) {
	stream, err := r.client.CopyFromActor(ctx, &atev1.NodeCopyFromRequest{Worker: worker, ActorUid: actorUID, Target: &atev1.CopyTarget{Path: path}})
	if err != nil {
		return 0, fromStatus(r.name, err)
	}
	n, err := io.Copy(w, execio.NewRecvReader(func() ([]byte, error) {
		m, err := stream.Recv()
		return m.GetData(), err
	}))
	return n, fromStatus(r.name, err)
}

// ExecActor implements atev1.NodeAgentServer.
func (s *Server) ExecActor(stream grpc.BidiStreamingServer[atev1.NodeExecRequest, atev1.ExecActorResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetReq().GetStart()
	if start == nil {
		return toStatus(errors.New("the first ExecActor request must carry start"))
	}
	recv := func() (*atev1.ExecActorRequest, error) {
		m, err := stream.Recv()
		return m.GetReq(), err
	}
	p := execio.Serve(start, recv, stream.Send)
	code, err := s.n.Exec(stream.Context(), nodeapi.ExecRequest{Worker: first.GetWorker(), ActorUID: first.GetActorUid(), Process: p})
	if err != nil {
		return toStatus(err)
	}
	return stream.Send(&atev1.ExecActorResponse{Msg: &atev1.ExecActorResponse_ExitCode{ExitCode: int32(code)}})
}

// CopyToActor implements atev1.NodeAgentServer.
func (s *Server) CopyToActor(stream grpc.ClientStreamingServer[atev1.NodeCopyToRequest, atev1.CopyToActorResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	t := first.GetReq().GetTarget()
	if t == nil {
		return toStatus(fmt.Errorf("%w: the first CopyToActor request must carry target", nodeapi.ErrBadPath))
	}
	r := execio.NewRecvReader(func() ([]byte, error) {
		m, err := stream.Recv()
		return m.GetReq().GetData(), err
	})
	size, err := s.n.CopyIn(stream.Context(), first.GetWorker(), first.GetActorUid(), t.GetPath(), fs.FileMode(t.GetMode()), r)
	if err != nil {
		return toStatus(err)
	}
	return stream.SendAndClose(&atev1.CopyToActorResponse{Size: size})
}

// CopyFromActor implements atev1.NodeAgentServer.
func (s *Server) CopyFromActor(req *atev1.NodeCopyFromRequest, stream grpc.ServerStreamingServer[atev1.CopyFromActorResponse]) error {
	w := execio.ChunkWriter(func(b []byte) error { return stream.Send(&atev1.CopyFromActorResponse{Data: b}) })
	_, err := s.n.CopyOut(stream.Context(), req.GetWorker(), req.GetActorUid(), req.GetTarget().GetPath(), w)
	return toStatus(err)
}
