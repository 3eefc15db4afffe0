package apiserver

import (
	"context"
	"fmt"
	"maps"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// TagActor implements atev1.ControlServer (lifecycle.Manager.Tag).
func (s *Server) TagActor(ctx context.Context, req *atev1.TagActorRequest) (*atev1.Tag, error) {
	key := names.ActorKey{Atespace: req.GetAtespace(), Name: req.GetActor()}
	if err := key.Validate(); err != nil {
		return nil, toStatus(err)
	}
	if err := names.ValidateLabel("tag name", req.GetTag()); err != nil {
		return nil, toStatus(err)
	}
	t, err := s.lc.Tag(ctx, key, &store.Tag{Atespace: req.GetAtespace(), Name: req.GetTag(), UID: NewUID(), CreateTime: time.Now().UTC()})
	if err != nil {
		return nil, toStatus(err)
	}
	return tagToProto(t), nil
}

// GetTag implements atev1.ControlServer.
func (s *Server) GetTag(ctx context.Context, req *atev1.GetTagRequest) (*atev1.Tag, error) {
	if err := validatePair("tag name", req.GetAtespace(), req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	t, err := s.store.GetTag(ctx, req.GetAtespace(), req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return tagToProto(t), nil
}

// ListTags implements atev1.ControlServer; an empty atespace lists all.
func (s *Server) ListTags(ctx context.Context, req *atev1.ListTagsRequest) (*atev1.ListTagsResponse, error) {
	if req.GetAtespace() != "" {
		if err := names.ValidateLabel("atespace", req.GetAtespace()); err != nil {
			return nil, toStatus(err)
		}
	}
	list, err := s.store.ListTags(ctx, req.GetAtespace())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &atev1.ListTagsResponse{}
	for _, t := range list {
		out.Tags = append(out.Tags, tagToProto(t))
	}
	return out, nil
}

// DeleteTag implements atev1.ControlServer (lifecycle.Manager.DeleteTag).
func (s *Server) DeleteTag(ctx context.Context, req *atev1.DeleteTagRequest) (*atev1.DeleteTagResponse, error) {
	if err := validatePair("tag name", req.GetAtespace(), req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.lc.DeleteTag(ctx, req.GetAtespace(), req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &atev1.DeleteTagResponse{}, nil
}

// createFork is CreateActor with from_tag or from_actor set
// (lifecycle.Manager.Fork); the actor's name and selector were checked.
func (s *Server) createFork(ctx context.Context, req *atev1.CreateActorRequest) (*atev1.Actor, error) {
	in := req.GetActor()
	src := lifecycle.ForkSource{Tag: req.GetFromTag(), Actor: req.GetFromActor()}
	switch {
	case src.Tag != "" && src.Actor != "":
		return nil, toStatus(fmt.Errorf("%w: set from_tag or from_actor, not both", errInvalid))
	case src.Tag != "":
		if err := names.ValidateLabel("tag name", src.Tag); err != nil {
			return nil, toStatus(err)
		}
	default:
		if err := names.ValidateLabel("actor name", src.Actor); err != nil {
			return nil, toStatus(err)
		}
		if src.Actor == in.GetName() {
			return nil, toStatus(fmt.Errorf("%w: an actor cannot be forked into itself", errInvalid))
		}
	}
	if in.GetTemplate() != "" {
		if err := names.ValidateLabel("template name", in.GetTemplate()); err != nil {
			return nil, toStatus(err)
		}
	}
	now := time.Now().UTC()
	a := &store.Actor{Atespace: in.GetAtespace(), Name: in.GetName(), UID: NewUID(), Template: in.GetTemplate(),
		WorkerSelector: maps.Clone(in.GetWorkerSelector()), Labels: maps.Clone(in.GetLabels()), CreateTime: now, StateTime: now}
	// A name already taken is refused before anything is copied; the
	// store checks again when it creates the actor.
	if _, err := s.store.GetActor(ctx, a.Key()); err == nil {
		return nil, toStatus(fmt.Errorf("actor %s: %w", a.Key(), store.ErrAlreadyExists))
	}
	out, err := s.lc.Fork(ctx, a, src)
	if err != nil {
		return nil, toStatus(err)
	}
	return actorToProto(ctx, out), nil
}

func tagToProto(t *store.Tag) *atev1.Tag {
	return &atev1.Tag{Atespace: t.Atespace, Name: t.Name, Uid: t.UID, Actor: t.Actor, ActorUid: t.ActorUID,
		Template: t.Template, Snapshot: t.Snapshot, CreateTime: timestamppb.New(t.CreateTime)}
}
