package store

import (
	"context"
	"time"
)

// RoleBinding grants a role to users and groups, in one atespace or in
// all (docs/security.md, Authentication and authorisation). Immutable
// once created: change one by deleting and creating it again.
type RoleBinding struct {
	// Name is unique in the store (a DNS-1123 label).
	Name string `json:"name"`
	// Atespace the role applies in; "" or "*" means every atespace (only
	// meaningful for admin, which is cluster-wide anyway).
	Atespace string `json:"atespace,omitempty"`
	// Role is "admin", "editor" or "viewer".
	Role string `json:"role"`
	// Users and Groups are the subjects (auth.Principal's Name and
	// Groups), matched exactly.
	Users  []string `json:"users,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// UID distinguishes incarnations of a name.
	UID        string    `json:"uid"`
	CreateTime time.Time `json:"createTime"`
}

// RoleBindings is the role binding part of the Store contract.
type RoleBindings interface {
	// CreateRoleBinding stores b; ErrAlreadyExists when its name is taken.
	CreateRoleBinding(ctx context.Context, b *RoleBinding) error
	// ListRoleBindings returns every binding in name order.
	ListRoleBindings(ctx context.Context) ([]*RoleBinding, error)
	// DeleteRoleBinding deletes the binding; ErrNotFound when none.
	DeleteRoleBinding(ctx context.Context, name string) error
}
