package nodeagent

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/actorlog"
	"substrate.dev/ate/internal/clock"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/snapshot"
)

// Remote is a registered node as the control plane uses it
// (nodeapi.Node): each step is a NodeAgent call; what the node's
// heartbeats report (each worker's activity, its standbys) is kept here,
// at most a heartbeat interval stale, so that claims and eviction read
// memory, not the network. The drain before every checkpoint covers a
// request that started since the last heartbeat.
type Remote struct {
	name   string
	client atev1.NodeAgentClient
	conn   *grpc.ClientConn

	mu       sync.Mutex
	activity map[string]nodeapi.Activity
	standbys map[string][]string
	// builds are the golden builds under way here, by template uid: each
	// one's phases, reported as events, queue for its BuildGolden call.
	builds map[string]chan nodeapi.BuildPhase
}

func newRemote(name string, conn *grpc.ClientConn) *Remote {
	return &Remote{name: name, conn: conn, client: atev1.NewNodeAgentClient(conn),
		activity: map[string]nodeapi.Activity{}, standbys: map[string][]string{}, builds: map[string]chan nodeapi.BuildPhase{}}
}

// Name implements nodeapi.Node.
func (r *Remote) Name() string { return r.name }

// Start implements nodeapi.Node.
func (r *Remote) Start(ctx context.Context, req nodeapi.StartRequest) error {
	_, err := r.client.StartActor(ctx, &atev1.StartActorRequest{Worker: req.Worker, ActorUid: req.ActorUID,
		Atespace: req.Atespace, Name: req.Name, Spec: req.Spec, Snapshot: req.Snapshot, Paused: req.Paused,
		ImageDigest: req.ImageDigest, VolumesFrom: req.VolumesFrom, LogRun: req.LogRun, Fence: nodeapi.FenceFrom(ctx)})
	if err == nil {
		r.hosts(req.Worker, req.ActorUID)
	}
	return fromStatus(r.name, err)
}

// Checkpoint implements nodeapi.Node.
func (r *Remote) Checkpoint(ctx context.Context, worker, actorUID string, opts nodeapi.CheckpointOptions) (string, error) {
	resp, err := r.client.CheckpointActor(ctx, &atev1.CheckpointActorRequest{Worker: worker, ActorUid: actorUID,
		Paused: opts.Paused, Scope: opts.Scope.String(), GraceMs: opts.Grace.Milliseconds(), SnapshotId: opts.ID,
		LeaveRunning: opts.LeaveRunning, Owner: opts.Owner, Fence: nodeapi.FenceFrom(ctx)})
	if !opts.LeaveRunning {
		r.clearActivity(worker, actorUID)
	}
	return resp.GetSnapshot(), fromStatus(r.name, err)
}

// Stop implements nodeapi.Node.
func (r *Remote) Stop(ctx context.Context, worker, actorUID string) error {
	_, err := r.client.StopActor(ctx, &atev1.StopActorRequest{Worker: worker, ActorUid: actorUID, Fence: nodeapi.FenceFrom(ctx)})
	r.clearActivity(worker, actorUID)
	return fromStatus(r.name, err)
}

// FenceActor implements nodeapi.Node.
func (r *Remote) FenceActor(ctx context.Context, actorUID string) error {
	_, err := r.client.FenceActor(ctx, &atev1.FenceActorRequest{ActorUid: actorUID, Fence: nodeapi.FenceFrom(ctx)})
	return fromStatus(r.name, err)
}

// BuildGolden implements nodeapi.Node. The phases the node reports
// while it builds (BUILD_PROGRESS events, on the registration stream)
// reach ctx's nodeapi.ProgressFunc in order, on a goroutine of their own,
// so a slow listener never holds up the stream's heartbeats; those that
// arrive after the build returned are dropped.
func (r *Remote) BuildGolden(ctx context.Context, tplUID, atespace, tplName string, spec *atev1.ActorTemplateSpec, snapshotID string) (string, string, error) {
	phases := make(chan nodeapi.BuildPhase, 8)
	r.mu.Lock()
	r.builds[tplUID] = phases
	r.mu.Unlock()
	told := make(chan struct{})
	go func() {
		defer close(told)
		for p := range phases {
			nodeapi.Progress(ctx, p)
		}
	}()
	defer func() {
		r.mu.Lock()
		delete(r.builds, tplUID)
		r.mu.Unlock()
		close(phases)
		<-told
	}()
	resp, err := r.client.BuildGolden(ctx, &atev1.BuildGoldenRequest{TemplateUid: tplUID, Atespace: atespace, Template: tplName, Spec: spec, SnapshotId: snapshotID})
	return resp.GetSnapshot(), resp.GetImageDigest(), fromStatus(r.name, err)
}

// buildProgress queues phase for the BuildGolden call building tplUID;
// nothing when none runs (or its queue is full: a progress line lost).
func (r *Remote) buildProgress(tplUID string, phase nodeapi.BuildPhase) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case r.builds[tplUID] <- phase:
	default:
	}
}

// Upload implements nodeapi.Node.
func (r *Remote) Upload(ctx context.Context, pausedRef, owner, snapshotID string, scope snapshot.Scope) (string, error) {
	resp, err := r.client.UploadPaused(ctx, &atev1.UploadPausedRequest{PausedSnapshot: pausedRef, Owner: owner, Scope: scope.String(), SnapshotId: snapshotID})
	return resp.GetSnapshot(), fromStatus(r.name, err)
}

// callTimeout bounds the calls whose failure loses nothing (a leftover
// paused copy or cache entry): they must not hold a workflow long.
const callTimeout = 10 * time.Second

// DeletePaused implements nodeapi.Node.
func (r *Remote) DeletePaused(ref string) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := r.client.DeletePaused(ctx, &atev1.DeletePausedRequest{PausedSnapshot: ref})
	return fromStatus(r.name, err)
}

// HostedActors implements nodeapi.Node.
func (r *Remote) HostedActors(ctx context.Context) (map[string]string, error) {
	resp, err := r.client.HostedActors(ctx, &atev1.HostedActorsRequest{})
	if err != nil {
		return nil, fromStatus(r.name, err)
	}
	return resp.GetActorUids(), nil
}

// ForgetActor implements nodeapi.Node.
func (r *Remote) ForgetActor(actorUID string) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, _ = r.client.ForgetActor(ctx, &atev1.ForgetActorRequest{ActorUid: actorUID})
}

// ReadActorLogs implements nodeapi.Node.
func (r *Remote) ReadActorLogs(ctx context.Context, actorUID string, after actorlog.Cursor, limit int) ([]actorlog.Line, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := r.client.ReadActorLogs(ctx, &atev1.ReadActorLogsRequest{ActorUid: actorUID, AfterRun: after.Run, AfterSeq: after.Seq, Limit: int32(limit)})
	if err != nil {
		return nil, fromStatus(r.name, err)
	}
	out := make([]actorlog.Line, 0, len(resp.GetLines()))
	for _, l := range resp.GetLines() {
		out = append(out, actorlog.FromProto(l))
	}
	return out, nil
}

// StandbyWorkers implements nodeapi.Node from the last heartbeat.
func (r *Remote) StandbyWorkers(spec *atev1.ActorTemplateSpec, imageDigest string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.standbys[node.StandbyKey(spec, imageDigest)]...)
}

// WorkerActivity implements nodeapi.Node from the last heartbeat.
func (r *Remote) WorkerActivity(worker string) (nodeapi.Activity, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.activity[worker]
	return a, ok
}

// hosted counts the workers hosting an actor, for placement.
func (r *Remote) hosted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.activity)
}

// hosts records that worker hosts actorUID, fresh and with nothing
// served, until the next heartbeat says otherwise.
func (r *Remote) hosts(worker, actorUID string) {
	now := clock.Now()
	r.mu.Lock()
	r.activity[worker] = nodeapi.Activity{ActorUID: actorUID, Started: now, Last: now}
	r.mu.Unlock()
}

func (r *Remote) clearActivity(worker, actorUID string) {
	r.mu.Lock()
	if r.activity[worker].ActorUID == actorUID {
		delete(r.activity, worker)
	}
	r.mu.Unlock()
}

// heard takes in a heartbeat. Its activity times are the node's clock;
// they are moved onto ours by how far the heartbeat's sent time is from
// our clock at its arrival, so idle decisions compare durations the node
// measured, not two machines' clocks. The heartbeat's time on the way
// makes an actor look that much less idle: the safe side.
func (r *Remote) heard(hb *atev1.NodeHeartbeat) {
	var shift time.Duration
	if hb.GetSent() != nil {
		shift = clock.Since(hb.GetSent().AsTime())
	}
	act := make(map[string]nodeapi.Activity, len(hb.GetActivity()))
	for _, a := range hb.GetActivity() {
		act[a.GetWorker()] = nodeapi.Activity{ActorUID: a.GetActorUid(), InFlight: int(a.GetInFlight()),
			Streams: int(a.GetStreams()), Listeners: int(a.GetListeners()), Served: a.GetServed(),
			Started: a.GetStarted().AsTime().Add(shift), Last: a.GetLast().AsTime().Add(shift)}
	}
	sb := make(map[string][]string, len(hb.GetStandbys()))
	for _, s := range hb.GetStandbys() {
		sb[s.GetKey()] = s.GetWorkers()
	}
	r.mu.Lock()
	r.activity, r.standbys = act, sb
	r.mu.Unlock()
}

func (r *Remote) close() { _ = r.conn.Close() }
