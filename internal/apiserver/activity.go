package apiserver

import (
	"context"
	"fmt"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
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
	acts := make([]names.Activity, 0, len(req.GetActivities()))
	for _, pa := range req.GetActivities() {
		act := pa.Activity()
		if err := act.Actor.Validate(); err != nil {
			return nil, toStatus(err)
		}
		if !pa.GetLastActivity().IsValid() {
			return nil, toStatus(fmt.Errorf("%w: last_activity of %s is missing or invalid", errInvalid, act.Actor))
		}
		acts = append(acts, act)
	}
	// One transaction for the whole report: a write per actor would hold
	// the store's single writer for a fsync each and stall resumes.
	if err := s.store.RecordActivity(ctx, acts); err != nil {
		return nil, toStatus(err)
	}
	return &atev1.RecordActivityResponse{}, nil
}
