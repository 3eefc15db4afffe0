package apiserver

import (
	"context"
	"fmt"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/actorlog"
	"substrate.dev/ate/internal/names"
)

// ActorLogs bounds and the follow's polling period.
const (
	maxLogTail = 100000
	// maxLogSince: a node keeps far less than this anyway (actorlog's
	// MaxFileBytes); the bound catches typos.
	maxLogSince = 30 * 24 * time.Hour
	// logPoll is how often a follow reads the nodes for new lines.
	logPoll = 250 * time.Millisecond
)

// ActorLogs implements atev1.ControlServer: the actor's lines from every
// node, in (run, seq) order; with follow, new ones as they come
// (actorlog.Follower says how nothing is lost or repeated), holding one
// of the caller's places in s.streams.
func (s *Server) ActorLogs(req *atev1.ActorLogsRequest, stream atev1.Control_ActorLogsServer) error {
	ctx := stream.Context()
	key := names.ActorKey{Atespace: req.GetAtespace(), Name: req.GetName()}
	if err := key.Validate(); err != nil {
		return toStatus(err)
	}
	if t := req.GetTail(); t < 0 || t > maxLogTail {
		return toStatus(fmt.Errorf("%w: tail %d is out of range; give 0 (all kept lines) to %d", errInvalid, t, maxLogTail))
	}
	since := time.Duration(req.GetSinceSeconds()) * time.Second
	if since < 0 || since > maxLogSince {
		return toStatus(fmt.Errorf("%w: since %ds is out of range; give 0 (no limit) up to %s", errInvalid, req.GetSinceSeconds(), maxLogSince))
	}
	a, err := s.store.GetActor(ctx, key)
	if err != nil {
		return toStatus(err)
	}
	if req.GetFollow() {
		// A follow runs until the client hangs up; a plain read ends by
		// itself.
		release, err := s.streams.acquire(ctx)
		if err != nil {
			return toStatus(err)
		}
		defer release()
	}
	src := func(ctx context.Context, after actorlog.Cursor) ([]actorlog.Line, error) {
		return s.lc.ReadActorLogs(ctx, a.UID, after)
	}
	f := actorlog.NewFollower(src)
	now := time.Now()
	first, err := f.Next(ctx, now)
	if err != nil {
		return toStatus(err)
	}
	if !req.GetFollow() {
		// No follower's caution is needed for one read: take every run.
		if first, err = src(ctx, actorlog.Cursor{}); err != nil {
			return toStatus(err)
		}
	}
	if since > 0 {
		cut := now.Add(-since)
		i := 0
		for i < len(first) && first[i].Time.Before(cut) {
			i++
		}
		first = first[i:]
	}
	if t := int(req.GetTail()); t > 0 && len(first) > t {
		first = first[len(first)-t:]
	}
	if err := sendLines(stream, first); err != nil || !req.GetFollow() {
		return err
	}
	tick := time.NewTicker(logPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			return errStopping
		case <-tick.C:
		}
		ls, err := f.Next(ctx, time.Now())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return toStatus(err)
		}
		if err := sendLines(stream, ls); err != nil {
			return err
		}
	}
}

func sendLines(stream atev1.Control_ActorLogsServer, ls []actorlog.Line) error {
	for _, l := range ls {
		if err := stream.Send(actorlog.ToProto(l)); err != nil {
			return err
		}
	}
	return nil
}
