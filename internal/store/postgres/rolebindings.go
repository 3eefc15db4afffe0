package postgres

import (
	"context"
	"fmt"

	"substrate.dev/ate/internal/store"
)

var _ store.RoleBindings = (*Store)(nil)

// CreateRoleBinding implements store.RoleBindings.
func (s *Store) CreateRoleBinding(ctx context.Context, rb *store.RoleBinding) error {
	rec, err := encode("rolebinding "+rb.Name, rb)
	if err != nil {
		return err
	}
	return s.do(ctx, func(q querier) error {
		_, err := q.Exec(ctx, `INSERT INTO role_bindings (name, record) VALUES ($1, $2)`, rb.Name, rec)
		if code, _ := pgCode(err); code == uniqueViolation {
			return fmt.Errorf("rolebinding %s: %w", rb.Name, store.ErrAlreadyExists)
		}
		return err
	})
}

// ListRoleBindings implements store.RoleBindings.
func (s *Store) ListRoleBindings(ctx context.Context) (out []*store.RoleBinding, err error) {
	err = s.do(ctx, func(q querier) error {
		out, err = list[store.RoleBinding](ctx, q, "role_bindings", `SELECT record FROM role_bindings ORDER BY name`)
		return err
	})
	return out, err
}

// DeleteRoleBinding implements store.RoleBindings.
func (s *Store) DeleteRoleBinding(ctx context.Context, name string) error {
	return s.do(ctx, func(q querier) error {
		tag, err := q.Exec(ctx, `DELETE FROM role_bindings WHERE name = $1`, name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("rolebinding %s: %w", name, store.ErrNotFound)
		}
		return nil
	})
}
