package postgres

import (
	"context"

	"substrate.dev/ate/internal/store"
)

// CountActors returns how many actors are in each state (states without
// actors absent): one GROUP BY over the state column, a sequential scan
// of the actors table that PostgreSQL does in tens of ms per hundred
// thousand rows. Callers bound how often they ask (metrics refresh it on
// an interval, never per scrape). Errors: the query's, wrapped in
// store.ErrUnavailable when the server cannot be reached.
func (s *Store) CountActors(ctx context.Context) (map[store.ActorState]int, error) {
	out := map[store.ActorState]int{}
	err := s.do(ctx, func(q querier) error {
		clear(out)
		rows, err := q.Query(ctx, `SELECT state, count(*) FROM actors GROUP BY state`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var state string
			var n int
			if err := rows.Scan(&state, &n); err != nil {
				return err
			}
			out[store.ActorState(state)] = n
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
