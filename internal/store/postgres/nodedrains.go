package postgres

import (
	"context"

	"substrate.dev/ate/internal/store"
)

var _ store.NodeDrains = (*Store)(nil)

// PutNodeDrain implements store.NodeDrains.
func (s *Store) PutNodeDrain(ctx context.Context, d *store.NodeDrain) error {
	rec, err := encode("node drain "+d.Node, d)
	if err != nil {
		return err
	}
	return s.do(ctx, func(q querier) error {
		_, err := q.Exec(ctx, `INSERT INTO node_drains (node, record) VALUES ($1, $2) ON CONFLICT (node) DO NOTHING`, d.Node, rec)
		return err
	})
}

// ListNodeDrains implements store.NodeDrains.
func (s *Store) ListNodeDrains(ctx context.Context) (out []*store.NodeDrain, err error) {
	err = s.do(ctx, func(q querier) error {
		out, err = list[store.NodeDrain](ctx, q, "node_drains", `SELECT record FROM node_drains ORDER BY node`)
		return err
	})
	return out, err
}

// DeleteNodeDrain implements store.NodeDrains.
func (s *Store) DeleteNodeDrain(ctx context.Context, node string) error {
	return s.do(ctx, func(q querier) error {
		_, err := q.Exec(ctx, `DELETE FROM node_drains WHERE node = $1`, node)
		return err
	})
}
