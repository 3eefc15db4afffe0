package apiserver

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/alarm"
	"substrate.dev/ate/internal/clock"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// Alarms is what the alarm RPCs need: *alarm.Scheduler.
type Alarms interface {
	Set(ctx context.Context, key names.ActorKey, at time.Time, path string) (*store.Alarm, error)
	List(ctx context.Context, atespace, actor string) ([]*store.Alarm, error)
	Cancel(ctx context.Context, id string) error
}

// SetAlarms makes the alarm RPCs use a; without it they answer
// UNIMPLEMENTED. Call it before serving.
func (s *Server) SetAlarms(a Alarms) { s.alarms = a }

// errNoAlarms is the alarm RPCs' answer without SetAlarms.
func (s *Server) alarmsOrErr() (Alarms, error) {
	if s.alarms == nil {
		return nil, fmt.Errorf("%w: this API server runs no alarm scheduler", errUnimplemented)
	}
	return s.alarms, nil
}

// SetAlarm implements atev1.ControlServer: exactly one of time and
// delay_ms; the path and time are checked by alarm.Validate.
func (s *Server) SetAlarm(ctx context.Context, req *atev1.SetAlarmRequest) (*atev1.Alarm, error) {
	al, err := s.alarmsOrErr()
	if err != nil {
		return nil, toStatus(err)
	}
	key := names.ActorKey{Atespace: req.GetAtespace(), Name: req.GetActor()}
	if err := key.Validate(); err != nil {
		return nil, toStatus(err)
	}
	at, err := alarmTime(clock.Now(), req)
	if err != nil {
		return nil, toStatus(err)
	}
	a, err := al.Set(ctx, key, at, req.GetPath())
	if err != nil {
		return nil, toStatus(err)
	}
	return alarmToProto(a), nil
}

// alarmTime is the due time req asks for, at now.
func alarmTime(now time.Time, req *atev1.SetAlarmRequest) (time.Time, error) {
	switch {
	case req.GetTime() != nil && req.GetDelayMs() != 0:
		return time.Time{}, fmt.Errorf("%w: set either time or delay_ms, not both", alarm.ErrInvalid)
	case req.GetTime() != nil:
		if err := req.GetTime().CheckValid(); err != nil {
			return time.Time{}, fmt.Errorf("%w: time: %v", alarm.ErrInvalid, err)
		}
		return req.GetTime().AsTime(), nil
	case req.GetDelayMs() < 0:
		return time.Time{}, fmt.Errorf("%w: delay_ms %d is negative", alarm.ErrInvalid, req.GetDelayMs())
	case req.GetDelayMs() > alarm.MaxAhead.Milliseconds():
		return time.Time{}, fmt.Errorf("%w: delay_ms %d is more than a year", alarm.ErrInvalid, req.GetDelayMs())
	case req.GetDelayMs() > 0:
		return now.Add(time.Duration(req.GetDelayMs()) * time.Millisecond), nil
	}
	return time.Time{}, fmt.Errorf("%w: set time or delay_ms (ate alarm: --at or --in)", alarm.ErrInvalid)
}

// ListAlarms implements atev1.ControlServer.
func (s *Server) ListAlarms(ctx context.Context, req *atev1.ListAlarmsRequest) (*atev1.ListAlarmsResponse, error) {
	al, err := s.alarmsOrErr()
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetAtespace() != "" {
		if err := names.ValidateLabel("atespace", req.GetAtespace()); err != nil {
			return nil, toStatus(err)
		}
	}
	if req.GetActor() != "" {
		if req.GetAtespace() == "" {
			return nil, toStatus(fmt.Errorf("%w: actor %q needs its atespace", errInvalid, req.GetActor()))
		}
		if err := names.ValidateLabel("actor", req.GetActor()); err != nil {
			return nil, toStatus(err)
		}
	}
	list, err := al.List(ctx, req.GetAtespace(), req.GetActor())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &atev1.ListAlarmsResponse{}
	for _, a := range list {
		out.Alarms = append(out.Alarms, alarmToProto(a))
	}
	return out, nil
}

// CancelAlarm implements atev1.ControlServer.
func (s *Server) CancelAlarm(ctx context.Context, req *atev1.CancelAlarmRequest) (*atev1.CancelAlarmResponse, error) {
	al, err := s.alarmsOrErr()
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetId() == "" {
		return nil, toStatus(fmt.Errorf("%w: id is empty; ate get alarms lists them", errInvalid))
	}
	if err := al.Cancel(ctx, req.GetId()); err != nil {
		return nil, toStatus(err)
	}
	return &atev1.CancelAlarmResponse{}, nil
}

func alarmToProto(a *store.Alarm) *atev1.Alarm {
	state := atev1.Alarm_PENDING
	if a.State == store.AlarmFailed {
		state = atev1.Alarm_FAILED
	}
	return &atev1.Alarm{Id: a.ID, Atespace: a.Atespace, Actor: a.Actor, Path: a.Path,
		Time: timestamppb.New(a.At), State: state, Attempts: int32(a.Attempts), Message: a.Message,
		NextAttempt: timestamppb.New(a.NextAttempt), CreateTime: timestamppb.New(a.CreateTime)}
}
