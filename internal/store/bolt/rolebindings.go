package bolt

import (
	"context"
	"fmt"

	"go.etcd.io/bbolt"

	"substrate.dev/ate/internal/store"
)

var _ store.RoleBindings = (*Store)(nil)

// CreateRoleBinding implements store.RoleBindings.
func (s *Store) CreateRoleBinding(_ context.Context, rb *store.RoleBinding) error {
	return s.update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bRoleBindings)
		if b.Get([]byte(rb.Name)) != nil {
			return fmt.Errorf("rolebinding %s: %w", rb.Name, store.ErrAlreadyExists)
		}
		return put(b, []byte(rb.Name), rb)
	})
}

// ListRoleBindings implements store.RoleBindings: keys sort by name.
func (s *Store) ListRoleBindings(_ context.Context) (out []*store.RoleBinding, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bRoleBindings).ForEach(func(k, v []byte) error {
			rb, err := decode[store.RoleBinding](k, v)
			if err != nil {
				return err
			}
			out = append(out, rb)
			return nil
		})
	})
	return out, err
}

// DeleteRoleBinding implements store.RoleBindings.
func (s *Store) DeleteRoleBinding(_ context.Context, name string) error {
	return s.update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bRoleBindings)
		if b.Get([]byte(name)) == nil {
			return fmt.Errorf("rolebinding %s: %w", name, store.ErrNotFound)
		}
		return b.Delete([]byte(name))
	})
}
