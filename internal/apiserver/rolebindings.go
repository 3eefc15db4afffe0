package apiserver

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// SetBindingsChanged sets what to call after this server created or
// deleted a role binding (auth.Policy.Invalidate), so the change applies
// to the next call at once rather than after the policy's cache expires.
func (s *Server) SetBindingsChanged(f func()) { s.bindingsChanged = f }

func (s *Server) changedBindings() {
	if s.bindingsChanged != nil {
		s.bindingsChanged()
	}
}

// CreateRoleBinding implements atev1.ControlServer.
func (s *Server) CreateRoleBinding(ctx context.Context, req *atev1.CreateRoleBindingRequest) (*atev1.RoleBinding, error) {
	in := req.GetBinding()
	if in == nil {
		return nil, toStatus(fmt.Errorf("%w: binding is required", errInvalid))
	}
	b := &store.RoleBinding{Name: in.GetName(), Atespace: in.GetAtespace(), Role: in.GetRole(), Users: in.GetUsers(), Groups: in.GetGroups(),
		UID: NewUID(), CreateTime: time.Now().UTC().Truncate(time.Millisecond)}
	if err := auth.ValidateBinding(b); err != nil {
		return nil, toStatus(err)
	}
	if b.Role != string(auth.RoleAdmin) && (b.Atespace == "" || b.Atespace == auth.AllAtespaces) {
		// Allowed (a viewer of everything), but say so: the usual
		// mistake is a forgotten -n.
		s.log.Info("role binding spans every atespace", "rolebinding", b.Name, "role", b.Role)
	}
	if err := s.store.CreateRoleBinding(ctx, b); err != nil {
		return nil, toStatus(err)
	}
	s.changedBindings()
	return roleBindingToProto(b), nil
}

// ListRoleBindings implements atev1.ControlServer.
func (s *Server) ListRoleBindings(ctx context.Context, _ *atev1.ListRoleBindingsRequest) (*atev1.ListRoleBindingsResponse, error) {
	list, err := s.store.ListRoleBindings(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &atev1.ListRoleBindingsResponse{}
	for _, b := range list {
		out.Bindings = append(out.Bindings, roleBindingToProto(b))
	}
	return out, nil
}

// DeleteRoleBinding implements atev1.ControlServer.
func (s *Server) DeleteRoleBinding(ctx context.Context, req *atev1.DeleteRoleBindingRequest) (*atev1.DeleteRoleBindingResponse, error) {
	if err := names.ValidateLabel("rolebinding", req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.store.DeleteRoleBinding(ctx, req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	s.changedBindings()
	return &atev1.DeleteRoleBindingResponse{}, nil
}

func roleBindingToProto(b *store.RoleBinding) *atev1.RoleBinding {
	return &atev1.RoleBinding{Name: b.Name, Atespace: b.Atespace, Role: b.Role, Users: b.Users, Groups: b.Groups,
		CreateTime: timestamppb.New(b.CreateTime)}
}

// AlarmAtespace returns the atespace of the alarm with id
// (auth.Authorizer.AlarmAtespace).
func AlarmAtespace(st store.Store) func(ctx context.Context, id string) (string, error) {
	return func(ctx context.Context, id string) (string, error) {
		a, err := st.GetAlarm(ctx, id)
		if err != nil {
			return "", err
		}
		return a.Atespace, nil
	}
}
