package nodeagent

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/actorlog"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/snapshot"
)

// Server is the NodeAgent gRPC service: the API server's calls on one
// node agent, each a step of the control plane's workflows (or an exec
// or copy) run by the nodeapi.Node it serves, the node's *node.Node;
// Remote is that Node on the API server's side.
type Server struct {
	atev1.UnimplementedNodeAgentServer
	n nodeapi.Node
	// report sends an event to the API server replicas (Agent.Report).
	report func(*atev1.NodeEvent)
}

// NewServer serves n, whose agent a reports what long calls are doing
// (a golden build's phases) to the API server.
func NewServer(n nodeapi.Node, a *Agent) *Server { return &Server{n: n, report: a.Report} }

// CheckpointTimeout bounds a checkpoint once begun: it runs to the end
// even when the API server that asked goes away, so a sandbox is never
// left half checkpointed (the API server's recovery reconciles the
// outcome).
const CheckpointTimeout = 2 * time.Minute

// StartActor implements atev1.NodeAgentServer.
func (s *Server) StartActor(ctx context.Context, r *atev1.StartActorRequest) (*atev1.StartActorResponse, error) {
	err := s.n.Start(nodeapi.WithFence(ctx, r.GetFence()), nodeapi.StartRequest{Worker: r.GetWorker(), ActorUID: r.GetActorUid(), Atespace: r.GetAtespace(),
		Name: r.GetName(), Spec: r.GetSpec(), Snapshot: r.GetSnapshot(), Paused: r.GetPaused(), ImageDigest: r.GetImageDigest(),
		VolumesFrom: r.GetVolumesFrom(), LogRun: r.GetLogRun()})
	return &atev1.StartActorResponse{}, toStatus(err)
}

// CheckpointActor implements atev1.NodeAgentServer.
func (s *Server) CheckpointActor(ctx context.Context, r *atev1.CheckpointActorRequest) (*atev1.CheckpointActorResponse, error) {
	scope, err := snapshot.ParseScope(r.GetScope())
	if err != nil {
		return nil, toStatus(err)
	}
	cctx, cancel := context.WithTimeout(nodeapi.WithFence(context.WithoutCancel(ctx), r.GetFence()), CheckpointTimeout)
	defer cancel()
	ref, err := s.n.Checkpoint(cctx, r.GetWorker(), r.GetActorUid(), nodeapi.CheckpointOptions{
		Paused: r.GetPaused(), Scope: scope, Grace: time.Duration(r.GetGraceMs()) * time.Millisecond, ID: r.GetSnapshotId(),
		LeaveRunning: r.GetLeaveRunning(), Owner: r.GetOwner()})
	return &atev1.CheckpointActorResponse{Snapshot: ref}, toStatus(err)
}

// StopActor implements atev1.NodeAgentServer.
func (s *Server) StopActor(ctx context.Context, r *atev1.StopActorRequest) (*atev1.StopActorResponse, error) {
	return &atev1.StopActorResponse{}, toStatus(s.n.Stop(nodeapi.WithFence(ctx, r.GetFence()), r.GetWorker(), r.GetActorUid()))
}

// FenceActor implements atev1.NodeAgentServer.
func (s *Server) FenceActor(ctx context.Context, r *atev1.FenceActorRequest) (*atev1.FenceActorResponse, error) {
	if r.GetFence() == 0 || r.GetActorUid() == "" {
		return nil, status.Error(codes.InvalidArgument, "FenceActor needs an actor_uid and a fence token")
	}
	return &atev1.FenceActorResponse{}, toStatus(s.n.FenceActor(nodeapi.WithFence(ctx, r.GetFence()), r.GetActorUid()))
}

// BuildGolden implements atev1.NodeAgentServer.
func (s *Server) BuildGolden(ctx context.Context, r *atev1.BuildGoldenRequest) (*atev1.BuildGoldenResponse, error) {
	// Each phase goes out as an event on the registration streams, which
	// the caller's Remote hands to its own progress listener.
	ctx = nodeapi.WithProgress(ctx, func(phase nodeapi.BuildPhase) {
		s.report(buildProgressEvent(r.GetTemplateUid(), phase))
	})
	ref, digest, err := s.n.BuildGolden(ctx, r.GetTemplateUid(), r.GetAtespace(), r.GetTemplate(), r.GetSpec(), r.GetSnapshotId())
	return &atev1.BuildGoldenResponse{Snapshot: ref, ImageDigest: digest}, toStatus(err)
}

// buildProgressEvent is the BUILD_PROGRESS event of template tplUID's
// golden build beginning phase: the phase as the enum and, for API
// servers older than it, as its human text.
func buildProgressEvent(tplUID string, phase nodeapi.BuildPhase) *atev1.NodeEvent {
	ev := &atev1.NodeEvent{Kind: atev1.NodeEvent_BUILD_PROGRESS, TemplateUid: tplUID}
	ev.FillBuildPhase(phase)
	return ev
}

// UploadPaused implements atev1.NodeAgentServer.
func (s *Server) UploadPaused(ctx context.Context, r *atev1.UploadPausedRequest) (*atev1.UploadPausedResponse, error) {
	scope, err := snapshot.ParseScope(r.GetScope())
	if err != nil {
		return nil, toStatus(err)
	}
	ref, err := s.n.Upload(ctx, r.GetPausedSnapshot(), r.GetOwner(), r.GetSnapshotId(), scope)
	return &atev1.UploadPausedResponse{Snapshot: ref}, toStatus(err)
}

// DeletePaused implements atev1.NodeAgentServer.
func (s *Server) DeletePaused(_ context.Context, r *atev1.DeletePausedRequest) (*atev1.DeletePausedResponse, error) {
	return &atev1.DeletePausedResponse{}, toStatus(s.n.DeletePaused(r.GetPausedSnapshot()))
}

// ReadActorLogs implements atev1.NodeAgentServer.
func (s *Server) ReadActorLogs(ctx context.Context, r *atev1.ReadActorLogsRequest) (*atev1.ReadActorLogsResponse, error) {
	lines, err := s.n.ReadActorLogs(ctx, r.GetActorUid(), actorlog.Cursor{Run: r.GetAfterRun(), Seq: r.GetAfterSeq()}, int(r.GetLimit()))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &atev1.ReadActorLogsResponse{Lines: make([]*atev1.ActorLogLine, 0, len(lines))}
	for _, l := range lines {
		out.Lines = append(out.Lines, actorlog.ToProto(l))
	}
	return out, nil
}

// ForgetActor implements atev1.NodeAgentServer.
func (s *Server) ForgetActor(_ context.Context, r *atev1.ForgetActorRequest) (*atev1.ForgetActorResponse, error) {
	s.n.ForgetActor(r.GetActorUid())
	return &atev1.ForgetActorResponse{}, nil
}

// HostedActors implements atev1.NodeAgentServer.
func (s *Server) HostedActors(ctx context.Context, _ *atev1.HostedActorsRequest) (*atev1.HostedActorsResponse, error) {
	hosted, err := s.n.HostedActors(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &atev1.HostedActorsResponse{ActorUids: hosted}, nil
}
