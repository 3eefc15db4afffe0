package apiserver

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// Event listing bounds and the watch's polling period.
const (
	defaultEventLimit = 100
	maxEventLimit     = lifecycle.EventMaxCount
	// eventPoll is how often a watch reads the store for new events:
	// polling by seq, not LISTEN/NOTIFY, works the same over bolt and
	// PostgreSQL and sees every replica's events (AppendEvent commits in
	// seq order on both); a watcher lags by at most this.
	eventPoll = 250 * time.Millisecond
)

// eventFilter checks the atespace and actor of a list or watch request.
func eventFilter(atespace, actor string) (store.EventFilter, error) {
	if atespace != "" {
		if err := names.ValidateLabel("atespace", atespace); err != nil {
			return store.EventFilter{}, err
		}
	}
	if actor != "" {
		if atespace == "" {
			return store.EventFilter{}, fmt.Errorf("%w: actor %q needs its atespace", errInvalid, actor)
		}
		if err := names.ValidateLabel("actor", actor); err != nil {
			return store.EventFilter{}, err
		}
	}
	return store.EventFilter{Atespace: atespace, Actor: actor}, nil
}

// ListEvents implements atev1.ControlServer.
func (s *Server) ListEvents(ctx context.Context, req *atev1.ListEventsRequest) (*atev1.ListEventsResponse, error) {
	f, err := eventFilter(req.GetAtespace(), req.GetActor())
	if err != nil {
		return nil, toStatus(err)
	}
	switch l := req.GetLimit(); {
	case l < 0 || l > maxEventLimit:
		return nil, toStatus(fmt.Errorf("%w: limit %d is out of range; give 1 to %d, or 0 for %d", errInvalid, l, maxEventLimit, defaultEventLimit))
	case l == 0:
		f.Limit = defaultEventLimit
	default:
		f.Limit = int(l)
	}
	f.Newest = true
	es, err := s.store.ListEvents(ctx, f)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &atev1.ListEventsResponse{Events: make([]*atev1.Event, 0, len(es))}
	for _, e := range es {
		out.Events = append(out.Events, eventToProto(ctx, e))
	}
	return out, nil
}

// WatchEvents implements atev1.ControlServer: it sends the kept events
// after req's cursor, then polls the store every eventPoll for new ones
// until the client hangs up. Each poll sends at most a page, so a
// cursor far behind catches up in steps. It holds one of the caller's
// places in s.streams while it runs.
func (s *Server) WatchEvents(req *atev1.WatchEventsRequest, stream atev1.Control_WatchEventsServer) error {
	ctx := stream.Context()
	f, err := eventFilter(req.GetAtespace(), req.GetActor())
	if err != nil {
		return toStatus(err)
	}
	if req.GetAfterSeq() < 0 {
		return toStatus(fmt.Errorf("%w: after_seq %d is negative", errInvalid, req.GetAfterSeq()))
	}
	f.After, f.Limit = req.GetAfterSeq(), 1000
	release, err := s.streams.acquire(ctx)
	if err != nil {
		return toStatus(err)
	}
	defer release()
	t := time.NewTicker(eventPoll)
	defer t.Stop()
	for {
		es, err := s.store.ListEvents(ctx, f)
		if err != nil {
			return toStatus(err)
		}
		for _, e := range es {
			if err := stream.Send(eventToProto(ctx, e)); err != nil {
				return err
			}
			f.After = e.Seq
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			return errStopping
		case <-t.C:
		}
	}
}

// eventToProto is e as ctx's caller may see it (actorToProto).
func eventToProto(ctx context.Context, e *store.Event) *atev1.Event {
	out := &atev1.Event{Seq: e.Seq, Time: timestamppb.New(e.Time), Type: string(e.Type), Atespace: e.Atespace,
		Actor: e.Actor, ActorUid: e.ActorUID, FromState: string(e.From), ToState: string(e.To),
		Worker: e.Worker, Node: e.Node, Message: e.Message}
	if e.Record != nil && !e.Record.EvictedFor.IsZero() && !auth.MayRead(ctx, e.Record.EvictedFor.Atespace) {
		out.Message = withoutName(out.Message, e.Record.EvictedFor)
	}
	if e.Record != nil {
		out.ActorRecord = actorToProto(ctx, e.Record)
	}
	return out
}
