package bolt

import (
	"bytes"
	"context"
	"fmt"

	"go.etcd.io/bbolt"

	"substrate.dev/ate/internal/codec"
	"substrate.dev/ate/internal/store"
)

var _ store.Tags = (*Store)(nil)

// CreateTag implements store.Tags.
func (s *Store) CreateTag(_ context.Context, t *store.Tag) error {
	return s.update(func(tx *bbolt.Tx) error {
		if tx.Bucket(bAtespaces).Get([]byte(t.Atespace)) == nil {
			return fmt.Errorf("atespace %s: %w", t.Atespace, store.ErrNotFound)
		}
		if tx.Bucket(bTemplates).Get(key2(t.Atespace, t.Template)) == nil {
			return fmt.Errorf("template %s/%s: %w", t.Atespace, t.Template, store.ErrNotFound)
		}
		k := key2(t.Atespace, t.Name)
		if tx.Bucket(bTags).Get(k) != nil {
			return fmt.Errorf("tag %s/%s: %w", t.Atespace, t.Name, store.ErrAlreadyExists)
		}
		return put(tx.Bucket(bTags), k, t)
	})
}

// GetTag implements store.Tags.
func (s *Store) GetTag(_ context.Context, atespace, name string) (out *store.Tag, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		out, err = get[store.Tag](tx.Bucket(bTags), key2(atespace, name))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tag %s/%s: %w", atespace, name, err)
	}
	return out, nil
}

// ListTags implements store.Tags: keys sort by atespace, then name.
func (s *Store) ListTags(_ context.Context, atespace string) (out []*store.Tag, err error) {
	var prefix []byte
	if atespace != "" {
		prefix = []byte(atespace + "/")
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bTags).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			t, err := decode[store.Tag](k, v)
			if err != nil {
				return err
			}
			out = append(out, t)
		}
		return nil
	})
	return out, err
}

// DeleteTag implements store.Tags.
func (s *Store) DeleteTag(_ context.Context, atespace, name, uid string) error {
	return s.update(func(tx *bbolt.Tx) error {
		k := key2(atespace, name)
		t, err := get[store.Tag](tx.Bucket(bTags), k)
		if err != nil {
			return fmt.Errorf("tag %s/%s: %w", atespace, name, err)
		}
		if t.UID != uid {
			return fmt.Errorf("tag %s/%s is another incarnation (uid %s, not %s): %w", atespace, name, t.UID, uid, store.ErrConflict)
		}
		return tx.Bucket(bTags).Delete(k)
	})
}

// tagOfTemplate returns the name of a tag of atespace that names
// template, or "" when none does.
func tagOfTemplate(tx *bbolt.Tx, atespace, template string) (string, error) {
	prefix := []byte(atespace + "/")
	c := tx.Bucket(bTags).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var t store.Tag
		if err := codec.Unmarshal(v, &t); err != nil {
			return "", fmt.Errorf("decode %s: %w", k, err)
		}
		if t.Template == template {
			return t.Name, nil
		}
	}
	return "", nil
}
