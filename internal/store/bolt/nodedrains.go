package bolt

import (
	"context"

	"go.etcd.io/bbolt"

	"substrate.dev/ate/internal/store"
)

// bNodeDrains holds drains by node name.
var bNodeDrains = []byte("nodeDrains")

var _ store.NodeDrains = (*Store)(nil)

// PutNodeDrain implements store.NodeDrains.
func (s *Store) PutNodeDrain(_ context.Context, d *store.NodeDrain) error {
	return s.update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bNodeDrains)
		if b.Get([]byte(d.Node)) != nil {
			return nil
		}
		return put(b, []byte(d.Node), d)
	})
}

// ListNodeDrains implements store.NodeDrains: keys sort by name.
func (s *Store) ListNodeDrains(_ context.Context) (out []*store.NodeDrain, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bNodeDrains).ForEach(func(k, v []byte) error {
			d, err := decode[store.NodeDrain](k, v)
			if err != nil {
				return err
			}
			out = append(out, d)
			return nil
		})
	})
	return out, err
}

// DeleteNodeDrain implements store.NodeDrains.
func (s *Store) DeleteNodeDrain(_ context.Context, node string) error {
	return s.update(func(tx *bbolt.Tx) error { return tx.Bucket(bNodeDrains).Delete([]byte(node)) })
}
