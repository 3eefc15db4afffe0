package bolt

import (
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"

	"go.etcd.io/bbolt"

	"substrate.dev/ate/internal/store"
)

var _ store.IngressTokens = (*Store)(nil)

// CreateIngressToken implements store.IngressTokens.
func (s *Store) CreateIngressToken(_ context.Context, t *store.IngressToken) error {
	return s.update(func(tx *bbolt.Tx) error {
		if tx.Bucket(bAtespaces).Get([]byte(t.Atespace)) == nil {
			return fmt.Errorf("atespace %s: %w", t.Atespace, store.ErrNotFound)
		}
		k := key2(t.Atespace, t.Name)
		if tx.Bucket(bIngressTokens).Get(k) != nil {
			return fmt.Errorf("ingress token %s/%s: %w", t.Atespace, t.Name, store.ErrAlreadyExists)
		}
		return put(tx.Bucket(bIngressTokens), k, t)
	})
}

// ListIngressTokens implements store.IngressTokens: keys sort by
// atespace, then name.
func (s *Store) ListIngressTokens(_ context.Context, atespace string) (out []*store.IngressToken, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		out, err = ingressTokens(tx, atespace)
		return err
	})
	return out, err
}

// FindIngressToken implements store.IngressTokens by scanning the
// atespace's tokens (a handful; the router caches the answers).
func (s *Store) FindIngressToken(_ context.Context, atespace, hash string) (out *store.IngressToken, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		list, err := ingressTokens(tx, atespace)
		if err != nil {
			return err
		}
		for _, t := range list {
			if subtle.ConstantTimeCompare([]byte(t.Hash), []byte(hash)) == 1 {
				out = t
				return nil
			}
		}
		return fmt.Errorf("ingress token of atespace %s with that hash: %w", atespace, store.ErrNotFound)
	})
	return out, err
}

// DeleteIngressToken implements store.IngressTokens.
func (s *Store) DeleteIngressToken(_ context.Context, atespace, name string) error {
	return s.update(func(tx *bbolt.Tx) error {
		k := key2(atespace, name)
		if tx.Bucket(bIngressTokens).Get(k) == nil {
			return fmt.Errorf("ingress token %s/%s: %w", atespace, name, store.ErrNotFound)
		}
		return tx.Bucket(bIngressTokens).Delete(k)
	})
}

// ingressTokens returns the tokens of atespace (all when empty) in key
// order.
func ingressTokens(tx *bbolt.Tx, atespace string) (out []*store.IngressToken, err error) {
	var prefix []byte
	if atespace != "" {
		prefix = []byte(atespace + "/")
	}
	c := tx.Bucket(bIngressTokens).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		t, err := decode[store.IngressToken](k, v)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// deleteIngressTokens deletes the tokens of atespace (DeleteAtespace).
func deleteIngressTokens(tx *bbolt.Tx, atespace string) error {
	prefix := []byte(atespace + "/")
	b := tx.Bucket(bIngressTokens)
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
