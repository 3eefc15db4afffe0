package apiserver

import (
	"context"
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
	acts := make([]store.Activity, 0, len(req.GetActivities()))
	for _, act := range req.GetActivities() {
		if err := validatePair("actor name", act.GetAtespace(), act.GetName()); err != nil {
			return nil, toStatus(err)
		}
		if !act.GetLastActivity().IsValid() {
			return nil, toStatus(fmt.Errorf("%w: last_activity of %s/%s is missing or invalid", errInvalid, act.GetAtespace(), act.GetName()))
		}
		acts = append(acts, store.Activity{Atespace: act.GetAtespace(), Name: act.GetName(), At: act.GetLastActivity().AsTime()})
	}
	// One transaction for the whole report: a write per actor would hold
	// the store's single writer for a fsync each and stall resumes.
	if err := s.store.RecordActivity(ctx, acts); err != nil {
		return nil, toStatus(err)
	}
	return &atev1.RecordActivityResponse{}, nil
}
