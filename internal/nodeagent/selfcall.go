package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
)

// SetSelfCallHandler makes SelfCall and SetSelfAlarm answer with f (the
// API server's self-service calls, which check the worker's assignment
// and map their verdicts to HTTP statuses); without one they answer
// UNIMPLEMENTED. Call it before serving.
func (r *Registry) SetSelfCallHandler(f nodeapi.SelfCallFunc) {
	r.mu.Lock()
	r.selfCall = f
	r.mu.Unlock()
}

// SelfCall implements atev1.NodeRegistryServer: the worker must be the
// calling node's in the record store — and, when the call carries a
// node's certificate identity, the node must be the one named — before
// f, which checks the worker's assignment, answers.
func (r *Registry) SelfCall(ctx context.Context, req *atev1.SelfCallRequest) (*atev1.SelfCallResponse, error) {
	code, answer, err := r.answerSelf(ctx, req.GetNode(), req.GetWorker(), req.GetActorUid(), req.GetCall(), req.GetBody())
	if err != nil {
		return nil, err
	}
	return &atev1.SelfCallResponse{Status: int32(code), Answer: answer}, nil
}

// answerSelf is the self-call handler's answer to call from the actor
// incarnation actorUID on worker, once the worker is the calling node's;
// a gRPC error when there is no handler or the worker is not the node's.
func (r *Registry) answerSelf(ctx context.Context, nodeName, worker, actorUID, call string, body []byte) (int, []byte, error) {
	r.mu.Lock()
	f := r.selfCall
	r.mu.Unlock()
	if f == nil {
		return 0, nil, status.Error(codes.Unimplemented, "this API server answers no self-service calls")
	}
	if err := r.ownWorker(ctx, nodeName, worker); err != nil {
		return 0, nil, err
	}
	code, answer := f(ctx, worker, actorUID, call, body)
	return code, answer, nil
}

// ownWorker returns nil if the record store registers worker as node's;
// FAILED_PRECONDITION or UNAVAILABLE otherwise.
func (r *Registry) ownWorker(ctx context.Context, nodeName, worker string) error {
	if _, err := checkNodeCaller(ctx, nodeName); err != nil {
		return err
	}
	w, err := r.cfg.Store.GetWorker(ctx, worker)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return status.Errorf(codes.FailedPrecondition, "worker %q is not registered", worker)
	case err != nil:
		return status.Errorf(codes.Unavailable, "read worker %s: %v", worker, err)
	case w.Node != nodeName:
		return status.Errorf(codes.FailedPrecondition, "worker %s is node %s's, not %s's", w.Name, w.Node, nodeName)
	}
	return nil
}

// SelfCall implements nodeapi.SelfCallFunc: it forwards the actor's call to
// a replica with a welcomed session (the next one if that replica cannot
// be reached) and relays its answer; 503 when none answers, so the actor
// retries, 501 when the API server answers no such calls — except a
// suspend or pause, which an API server from before SelfCall gets as the
// SELF_REQUEST event it checks on its own (202), so a rolling upgrade
// keeps self-service working. The alarms call goes as SetSelfAlarm, which
// API servers from before SelfCall answer too.
func (a *Agent) SelfCall(ctx context.Context, worker, actorUID, call string, body []byte) (int, []byte) {
	if call == nodeapi.SelfCallAlarms {
		return a.selfAlarm(ctx, worker, actorUID, body)
	}
	req := &atev1.SelfCallRequest{Node: a.cfg.Node.Name(), Worker: worker, ActorUid: actorUID, Call: call, Body: body}
	var resp *atev1.SelfCallResponse
	err := a.forwardSelf(ctx, func(ctx context.Context, c atev1.NodeRegistryClient) (err error) {
		resp, err = c.SelfCall(ctx, req)
		return err
	})
	if err == nil {
		return int(resp.GetStatus()), resp.GetAnswer()
	}
	code := http.StatusServiceUnavailable
	if st, ok := status.FromError(errors.Unwrap(err)); ok && st.Code() == codes.Unimplemented {
		if action, perr := checkpoint.ParseAction(call); perr == nil {
			a.selfRequest(worker, actorUID, action)
			return http.StatusAccepted, []byte(action.String() + " requested\n")
		}
		code = http.StatusNotImplemented
	}
	a.log.WarnContext(ctx, "forward self-service call", "call", call, "worker", worker, "err", err)
	return code, fmt.Appendf(nil, "%s not done: %v; retry later\n", call, err)
}
