package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/store"
)

// SetSelfAlarmHandler makes SetSelfAlarm answer with f (the API server's
// alarm.Scheduler.ServeSelf); without one it answers UNIMPLEMENTED. Call
// it before serving.
func (r *Registry) SetSelfAlarmHandler(f node.SelfAlarmFunc) {
	r.mu.Lock()
	r.selfAlarm = f
	r.mu.Unlock()
}

// SetSelfAlarm implements atev1.NodeRegistryServer: the worker must be
// the calling node's in the record store; f checks that it hosts the
// actor.
func (r *Registry) SetSelfAlarm(ctx context.Context, req *atev1.SetSelfAlarmRequest) (*atev1.SetSelfAlarmResponse, error) {
	r.mu.Lock()
	f := r.selfAlarm
	r.mu.Unlock()
	if f == nil {
		return nil, status.Error(codes.Unimplemented, "this API server runs no alarm scheduler")
	}
	if _, err := checkNodeCaller(ctx, req.GetNode()); err != nil {
		return nil, err
	}
	w, err := r.cfg.Store.GetWorker(ctx, req.GetWorker())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, status.Errorf(codes.FailedPrecondition, "worker %q is not registered", req.GetWorker())
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "read worker %s: %v", req.GetWorker(), err)
	case w.Node != req.GetNode():
		return nil, status.Errorf(codes.FailedPrecondition, "worker %s is node %s's, not %s's", w.Name, w.Node, req.GetNode())
	}
	code, answer := f(ctx, req.GetWorker(), req.GetActorUid(), req.GetBody())
	return &atev1.SetSelfAlarmResponse{Status: int32(code), Answer: answer}, nil
}

// selfAlarmTimeout bounds a forwarded alarm request per replica tried.
const selfAlarmTimeout = 10 * time.Second

// SelfAlarm implements node.SelfAlarmFunc: it forwards the actor's alarm
// request to a replica with a welcomed session (the next one if that
// replica cannot be reached) and relays its answer; 503 when none
// answers, so the actor retries.
func (a *Agent) SelfAlarm(ctx context.Context, worker, actorUID string, body []byte) (int, []byte) {
	req := &atev1.SetSelfAlarmRequest{Node: a.cfg.Node.Name(), Worker: worker, ActorUid: actorUID, Body: body}
	var last error = errors.New("no API server replica is connected")
	for _, l := range a.current() {
		l.mu.Lock()
		live := l.live
		l.mu.Unlock()
		if !live {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, selfAlarmTimeout)
		resp, err := atev1.NewNodeRegistryClient(l.conn).SetSelfAlarm(cctx, req)
		cancel()
		if err == nil {
			return int(resp.GetStatus()), resp.GetAnswer()
		}
		last = fmt.Errorf("API server %s: %w", l.addr, err)
		if st, _ := status.FromError(err); st.Code() != codes.Unavailable && st.Code() != codes.DeadlineExceeded {
			break // the replica's verdict, not its absence
		}
	}
	a.log.WarnContext(ctx, "forward self-service alarm", "worker", worker, "err", last)
	code := http.StatusServiceUnavailable
	if st, ok := status.FromError(errors.Unwrap(last)); ok && st.Code() == codes.Unimplemented {
		code = http.StatusNotImplemented
	}
	return code, []byte(fmt.Sprintf("alarm not set: %v; retry later\n", last))
}
