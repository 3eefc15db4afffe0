package bolt

import (
	"context"
	"fmt"

	"go.etcd.io/bbolt"

	"substrate.dev/ate/internal/codec"
	"substrate.dev/ate/internal/store"
)

// CountActors returns how many actors are in each state (states without
// actors absent). bbolt has no index by state, so this reads every
// actor's record in one read transaction, decoding only its state (a few
// hundred ns per actor: ~20 ms per hundred thousand); callers bound how
// often they ask (metrics refresh it on an interval, never per scrape).
// A read transaction blocks no writer.
func (s *Store) CountActors(_ context.Context) (map[store.ActorState]int, error) {
	out := map[store.ActorState]int{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bActors).ForEach(func(k, v []byte) error {
			var a struct {
				State store.ActorState `json:"state"`
			}
			if err := codec.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("decode %s: %w", k, err)
			}
			out[a.State]++
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
