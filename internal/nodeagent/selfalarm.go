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
	"substrate.dev/ate/internal/nodeapi"
)

// SetSelfAlarm implements atev1.NodeRegistryServer: the alarms call,
// answered as SelfCall answers the others (the self-call handler checks
// that the worker hosts the actor). It is an RPC of its own because it
// came first; nodes still send alarms this way.
func (r *Registry) SetSelfAlarm(ctx context.Context, req *atev1.SetSelfAlarmRequest) (*atev1.SetSelfAlarmResponse, error) {
	code, answer, err := r.answerSelf(ctx, req.GetNode(), req.GetWorker(), req.GetActorUid(), nodeapi.SelfCallAlarms, req.GetBody())
	if err != nil {
		return nil, err
	}
	return &atev1.SetSelfAlarmResponse{Status: int32(code), Answer: answer}, nil
}

// selfAlarmTimeout bounds a forwarded alarm request per replica tried.
const selfAlarmTimeout = 10 * time.Second

// selfAlarm is SelfCall's alarms call: it forwards the actor's alarm
// request to a replica with a welcomed session (the next one if that
// replica cannot be reached) and relays its answer; 503 when none
// answers, so the actor retries.
func (a *Agent) selfAlarm(ctx context.Context, worker, actorUID string, body []byte) (int, []byte) {
	req := &atev1.SetSelfAlarmRequest{Node: a.cfg.Node.Name(), Worker: worker, ActorUid: actorUID, Body: body}
	var resp *atev1.SetSelfAlarmResponse
	last := a.forwardSelf(ctx, func(ctx context.Context, c atev1.NodeRegistryClient) (err error) {
		resp, err = c.SetSelfAlarm(ctx, req)
		return err
	})
	if last == nil {
		return int(resp.GetStatus()), resp.GetAnswer()
	}
	a.log.WarnContext(ctx, "forward self-service alarm", "worker", worker, "err", last)
	code := http.StatusServiceUnavailable
	if st, ok := status.FromError(errors.Unwrap(last)); ok && st.Code() == codes.Unimplemented {
		code = http.StatusNotImplemented
	}
	return code, []byte(fmt.Sprintf("alarm not set: %v; retry later\n", last))
}

// forwardSelf calls rpc on a replica with a welcomed session, trying the
// next one while a replica cannot be reached, each for at most
// selfAlarmTimeout. It returns nil once one answered, else the last
// error, wrapped with the replica's address (a replica's verdict, not
// its absence, ends the tries).
func (a *Agent) forwardSelf(ctx context.Context, rpc func(context.Context, atev1.NodeRegistryClient) error) error {
	var last error = errors.New("no API server replica is connected")
	for _, l := range a.current() {
		l.mu.Lock()
		live := l.live
		l.mu.Unlock()
		if !live {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, selfAlarmTimeout)
		err := rpc(cctx, atev1.NewNodeRegistryClient(l.conn))
		cancel()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("API server %s: %w", l.addr, err)
		if st, _ := status.FromError(err); st.Code() != codes.Unavailable && st.Code() != codes.DeadlineExceeded {
			break // the replica's verdict, not its absence
		}
	}
	return last
}
