package apiserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/labels"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/clock"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// maxSelector bounds a worker selector's size.
const maxSelector = 32

func validateSelector(sel map[string]string) error {
	if len(sel) > maxSelector {
		return fmt.Errorf("%w: worker selector has %d entries, at most %d", errInvalid, len(sel), maxSelector)
	}
	for k, v := range sel {
		if k == "" || len(k) > 253 || len(v) > 63 {
			return fmt.Errorf("%w: worker selector entry %q=%q: key 1-253 and value 0-63 characters", errInvalid, k, v)
		}
	}
	return nil
}

// CreateActor implements atev1.ControlServer.
func (s *Server) CreateActor(ctx context.Context, req *atev1.CreateActorRequest) (*atev1.Actor, error) {
	in := req.GetActor()
	if err := validatePair("actor name", in.GetAtespace(), in.GetName()); err != nil {
		return nil, toStatus(err)
	}
	if err := validateLabels(in.GetLabels()); err != nil {
		return nil, toStatus(err)
	}
	if req.GetFromTag() != "" || req.GetFromActor() != "" {
		if err := validateSelector(in.GetWorkerSelector()); err != nil {
			return nil, toStatus(err)
		}
		return s.createFork(ctx, req)
	}
	if err := names.ValidateLabel("template name", in.GetTemplate()); err != nil {
		return nil, toStatus(err)
	}
	if err := validateSelector(in.GetWorkerSelector()); err != nil {
		return nil, toStatus(err)
	}
	// A missing atespace or template is the store's to report (it checks
	// both, in that order, in the creating transaction); here only a
	// template that exists but failed to build is refused.
	if tpl, err := s.store.GetTemplate(ctx, in.GetAtespace(), in.GetTemplate()); err == nil && tpl.Phase == store.TemplateFailed {
		return nil, toStatus(fmt.Errorf("%w: template %s/%s failed to build (%s); fix it and create a new template",
			lifecycle.ErrFailedPrecondition, tpl.Atespace, tpl.Name, tpl.Message))
	}
	now := clock.Now().UTC()
	a := &store.Actor{Atespace: in.GetAtespace(), Name: in.GetName(), UID: NewUID(), Template: in.GetTemplate(),
		Lifecycle: store.Lifecycle{State: store.Suspended}, WorkerSelector: maps.Clone(in.GetWorkerSelector()),
		Labels: maps.Clone(in.GetLabels()), CreateTime: now, StateTime: now}
	if err := s.store.CreateActor(ctx, a); err != nil {
		return nil, toStatus(err)
	}
	return actorToProto(ctx, a), nil
}

// GetActor implements atev1.ControlServer.
func (s *Server) GetActor(ctx context.Context, req *atev1.GetActorRequest) (*atev1.Actor, error) {
	return actorCall(ctx, req.GetAtespace(), req.GetName(), s.store.GetActor)
}

// ListActors implements atev1.ControlServer; an empty atespace lists all.
func (s *Server) ListActors(ctx context.Context, req *atev1.ListActorsRequest) (*atev1.ListActorsResponse, error) {
	if req.GetAtespace() != "" {
		if err := names.ValidateLabel("atespace", req.GetAtespace()); err != nil {
			return nil, toStatus(err)
		}
	}
	selector, err := parseLabelSelector(req.GetLabelSelector())
	if err != nil {
		return nil, toStatus(err)
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		return nil, toStatus(fmt.Errorf("%w: page_size must not be negative", errInvalid))
	case size == 0:
		size = defaultPageSize
	case size > maxPageSize:
		size = maxPageSize
	}
	list, next, err := s.store.ListActors(ctx, req.GetAtespace(), size, req.GetPageToken())
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrUnavailable) && req.GetPageToken() != "" {
			err = fmt.Errorf("%w: %w", errInvalid, err)
		}
		return nil, toStatus(err)
	}
	out := &atev1.ListActorsResponse{NextPageToken: next}
	ttls, now := lifecycle.NewTTLs(s.store), time.Now()
	for _, a := range list {
		if !selector.Matches(labels.Set(a.Labels)) {
			continue
		}
		if req.GetExpiredOnly() {
			// The sweep's own test (lifecycle.ExpiredFor), so this
			// listing is what its next pass would delete.
			if _, expired, err := ttls.Expired(ctx, a, now); err != nil {
				return nil, toStatus(err)
			} else if !expired {
				continue
			}
		}
		out.Actors = append(out.Actors, actorToProto(ctx, a))
	}
	return out, nil
}

// UpdateActor implements atev1.ControlServer: it replaces the worker
// selector, which takes effect at the next resume, or, with template set,
// moves the actor to another template (lifecycle.MoveTemplate).
func (s *Server) UpdateActor(ctx context.Context, req *atev1.UpdateActorRequest) (*atev1.Actor, error) {
	key := names.ActorKey{Atespace: req.GetAtespace(), Name: req.GetName()}
	if err := key.Validate(); err != nil {
		return nil, toStatus(err)
	}
	if err := validateSelector(req.GetWorkerSelector()); err != nil {
		return nil, toStatus(err)
	}
	if to := req.GetTemplate(); to != "" {
		if len(req.GetWorkerSelector()) > 0 {
			return nil, toStatus(fmt.Errorf("%w: set either template (a move) or worker_selector, not both in one update", errInvalid))
		}
		if err := names.ValidateLabel("template", to); err != nil {
			return nil, toStatus(err)
		}
		out, err := s.lc.MoveTemplate(ctx, key, to)
		if err != nil {
			return nil, toStatus(err)
		}
		return actorToProto(ctx, out), nil
	}
	for range 5 {
		a, err := s.store.GetActor(ctx, key)
		if err != nil {
			return nil, toStatus(err)
		}
		a.WorkerSelector = maps.Clone(req.GetWorkerSelector())
		out, err := s.store.UpdateActor(ctx, a)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, toStatus(err)
		}
		return actorToProto(ctx, out), nil
	}
	return nil, toStatus(fmt.Errorf("actor %s kept changing: %w", key, store.ErrConflict))
}

// DeleteActor implements atev1.ControlServer.
func (s *Server) DeleteActor(ctx context.Context, req *atev1.DeleteActorRequest) (*atev1.DeleteActorResponse, error) {
	key := names.ActorKey{Atespace: req.GetAtespace(), Name: req.GetName()}
	if err := key.Validate(); err != nil {
		return nil, toStatus(err)
	}
	if err := s.lc.Delete(ctx, key, req.GetForce()); err != nil {
		return nil, toStatus(err)
	}
	return &atev1.DeleteActorResponse{}, nil
}

// SuspendActor implements atev1.ControlServer.
func (s *Server) SuspendActor(ctx context.Context, req *atev1.SuspendActorRequest) (*atev1.Actor, error) {
	return s.putAway(ctx, req.GetAtespace(), req.GetName(), checkpoint.Suspend, req.GetReason())
}

// ResumeActor implements atev1.ControlServer; it sets atev1.HeaderEvicted
// for a caller who may read the evicted actor's atespace.
func (s *Server) ResumeActor(ctx context.Context, req *atev1.ResumeActorRequest) (*atev1.Actor, error) {
	return actorCall(ctx, req.GetAtespace(), req.GetName(), func(ctx context.Context, key names.ActorKey) (*store.Actor, error) {
		a, r, err := s.lc.ResumeEvicting(ctx, key)
		// The evicted actor is named only to a caller who may see it:
		// eviction crosses atespaces.
		if err == nil && !r.Evicted.IsZero() && auth.MayRead(ctx, r.Evicted.Atespace) {
			if herr := grpc.SetHeader(ctx, metadata.Pairs(atev1.HeaderEvicted, r.Evicted.String())); herr != nil {
				s.log.DebugContext(ctx, "set evicted header", "err", herr)
			}
		}
		return a, err
	})
}

// PauseActor implements atev1.ControlServer.
func (s *Server) PauseActor(ctx context.Context, req *atev1.PauseActorRequest) (*atev1.Actor, error) {
	return s.putAway(ctx, req.GetAtespace(), req.GetName(), checkpoint.Pause, req.GetReason())
}

// putAway suspends or pauses an actor for a client-given reason: REQUESTED
// (the default) or IDLE; the other reasons are the system's own.
func (s *Server) putAway(ctx context.Context, atespace, name string, action checkpoint.Action, reason atev1.CheckpointReason) (*atev1.Actor, error) {
	why := lifecycle.Why{Reason: store.ReasonRequested}
	switch reason {
	case atev1.CheckpointReason_CHECKPOINT_REASON_UNSPECIFIED, atev1.CheckpointReason_REQUESTED:
	case atev1.CheckpointReason_IDLE:
		why.Reason = store.ReasonIdle
	default:
		return nil, toStatus(fmt.Errorf("%w: reason must be REQUESTED or IDLE, got %s", errInvalid, reason))
	}
	return actorCall(ctx, atespace, name, func(ctx context.Context, key names.ActorKey) (*store.Actor, error) {
		return s.lc.PutAway(ctx, key, action, why)
	})
}

// RevertActor implements atev1.ControlServer.
func (s *Server) RevertActor(ctx context.Context, req *atev1.RevertActorRequest) (*atev1.Actor, error) {
	return actorCall(ctx, req.GetAtespace(), req.GetName(), s.lc.Revert)
}

// actorCall validates an actor's name and runs run on it: a lifecycle
// workflow (a lifecycle.Manager method) or a store read.
func actorCall(ctx context.Context, atespace, name string,
	run func(ctx context.Context, key names.ActorKey) (*store.Actor, error)) (*atev1.Actor, error) {
	key := names.ActorKey{Atespace: atespace, Name: name}
	if err := key.Validate(); err != nil {
		return nil, toStatus(err)
	}
	a, err := run(ctx, key)
	if err != nil {
		return nil, toStatus(err)
	}
	return actorToProto(ctx, a), nil
}

// ListWorkers implements atev1.ControlServer.
func (s *Server) ListWorkers(ctx context.Context, _ *atev1.ListWorkersRequest) (*atev1.ListWorkersResponse, error) {
	list, err := s.store.ListWorkers(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &atev1.ListWorkersResponse{}
	for _, w := range list {
		out.Workers = append(out.Workers, workerToProto(w))
	}
	return out, nil
}
