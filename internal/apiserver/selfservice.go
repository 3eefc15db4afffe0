package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"substrate.dev/ate/internal/alarm"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/identity"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
)

// SelfAlarms sets the alarm an actor asks for (*alarm.Scheduler).
type SelfAlarms interface {
	SetSelf(ctx context.Context, worker, actorUID string, body []byte) (*store.Alarm, error)
}

// SelfTokens mints the token an actor asks for (*identity.Issuer).
type SelfTokens interface {
	MintSelf(ctx context.Context, worker, actorUID string, body []byte) (*identity.Token, error)
}

// SelfCheckpoints puts away the actor that asks (*lifecycle.Manager).
type SelfCheckpoints interface {
	RequestSelfCheckpoint(ctx context.Context, worker, actorUID string, action checkpoint.Action) error
}

var (
	_ SelfAlarms      = (*alarm.Scheduler)(nil)
	_ SelfTokens      = (*identity.Issuer)(nil)
	_ SelfCheckpoints = (*lifecycle.Manager)(nil)
)

// SelfService answers the calls actors make from inside their sandboxes
// on their worker's self-service endpoint (POST /v1/alarms, /v1/token,
// /v1/suspend, /v1/pause; docs/actors.md), which their node forwards
// with the worker's name and the actor incarnation its gate admits
// (NodeRegistry.SetSelfAlarm and SelfCall). The domain packages decide
// each call, checking the worker's assignment in the record store, and
// return results and errors; Answer turns them into the HTTP status and
// body the node relays to the actor, the errors through selfStatus, the
// one table of those statuses. Safe for concurrent use.
type SelfService struct {
	alarms      SelfAlarms
	tokens      SelfTokens
	checkpoints SelfCheckpoints
	log         *slog.Logger
}

// NewSelfService returns the self-service answers of alarms, tokens and
// checkpoints; log (nil: none) records the failures answered 500.
func NewSelfService(alarms SelfAlarms, tokens SelfTokens, checkpoints SelfCheckpoints, log *slog.Logger) *SelfService {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &SelfService{alarms: alarms, tokens: tokens, checkpoints: checkpoints, log: log}
}

// errUnknownCall: a self-service call the API server does not know.
var errUnknownCall = errors.New("unknown self-service call")

// Answer answers call (nodeapi.SelfCallAlarms, nodeapi.SelfCallToken or
// a checkpoint action's name) from the actor incarnation actorUID on
// worker, with the body it sent; it is a nodeapi.SelfCallFunc, which the
// node registry calls. Accepted calls answer 201 with the alarm's
// {"id", "time"}, 200 with the token as JSON, or 202 "<action>
// requested"; refusals answer selfStatus's status with the error's
// message, which says what to change.
func (s *SelfService) Answer(ctx context.Context, worker, actorUID, call string, body []byte) (status int, answer []byte) {
	status, answer, err := s.call(ctx, worker, actorUID, call, body)
	if err == nil {
		return status, answer
	}
	status = selfStatus(err)
	if status == http.StatusInternalServerError {
		s.log.WarnContext(ctx, "self-service call failed", "call", call, "worker", worker, "actorUid", actorUID, "err", err)
	}
	return status, []byte(err.Error() + "\n")
}

// call hands call to its domain and returns its success status and
// answer, or the domain's error.
func (s *SelfService) call(ctx context.Context, worker, actorUID, call string, body []byte) (int, []byte, error) {
	switch call {
	case nodeapi.SelfCallAlarms:
		a, err := s.alarms.SetSelf(ctx, worker, actorUID, body)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusCreated, fmt.Appendf(nil, "{\"id\":%q,\"time\":%q}\n", a.ID, a.At.Format(time.RFC3339Nano)), nil
	case nodeapi.SelfCallToken:
		tok, err := s.tokens.MintSelf(ctx, worker, actorUID, body)
		if err != nil {
			return 0, nil, err
		}
		b, err := json.Marshal(tok)
		if err != nil {
			return 0, nil, fmt.Errorf("encode token: %w", err)
		}
		return http.StatusOK, append(b, '\n'), nil
	}
	// Only an action's own name: ParseAction also reads "" as suspend
	// (a template's default), which is no call.
	action, err := checkpoint.ParseAction(call)
	if err != nil || call != action.String() {
		return 0, nil, fmt.Errorf("%w %q: want %s, %s, %s or %s", errUnknownCall, call,
			nodeapi.SelfCallAlarms, nodeapi.SelfCallToken, checkpoint.Suspend, checkpoint.Pause)
	}
	if err := s.checkpoints.RequestSelfCheckpoint(ctx, worker, actorUID, action); err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, []byte(action.String() + " requested\n"), nil
}
