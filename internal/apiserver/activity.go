package apiserver

import (
	"context"
	"errors"
	"fmt"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/store"
)

// maxActivities bounds one RecordActivity call.
const maxActivities = 10000

// RecordActivity implements atev1.ControlServer: it moves each actor's
// last_activity forward (never back). Unknown actors are skipped, since the
// router may report an actor deleted meanwhile.
func (s *Server) RecordActivity(ctx context.Context, req *atev1.RecordActivityRequest) (*atev1.RecordActivityResponse, error) {
	if n := len(req.GetActivities()); n > maxActivities {
		return nil, toStatus(fmt.Errorf("%w: %d activities in one call, at most %d", errInvalid, n, maxActivities))
	}
	for _, act := range req.GetActivities() {
		if err := validatePair("actor name", act.GetAtespace(), act.GetName()); err != nil {
			return nil, toStatus(err)
		}
		if !act.GetLastActivity().IsValid() {
			return nil, toStatus(fmt.Errorf("%w: last_activity of %s/%s is missing or invalid", errInvalid, act.GetAtespace(), act.GetName()))
		}
	}
	for _, act := range req.GetActivities() {
		if err := s.recordOne(ctx, act); err != nil {
			return nil, toStatus(err)
		}
	}
	return &atev1.RecordActivityResponse{}, nil
}

func (s *Server) recordOne(ctx context.Context, act *atev1.ActorActivity) error {
	at := act.GetLastActivity().AsTime()
	for range 5 {
		a, err := s.store.GetActor(ctx, act.GetAtespace(), act.GetName())
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !at.After(a.LastActivity) {
			return nil
		}
		a.LastActivity = at
		if _, err = s.store.UpdateActor(ctx, a); !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return nil // lost every race to workflows; the next report catches up
}
