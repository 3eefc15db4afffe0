package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"time"

	bbolt "go.etcd.io/bbolt"

	"substrate.dev/ate/internal/store"
)

// bEvents holds events by their Seq, big-endian, so a cursor walks them
// in append order. bbolt serialises writers, so sequence numbers commit
// in order and a watcher reading Seq > cursor never skips one.
var bEvents = []byte("events")

func seqKey(seq int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(seq)) }

// AppendEvent implements store.Store.
func (s *Store) AppendEvent(ctx context.Context, e *store.Event) error {
	return s.AppendEvents(ctx, []*store.Event{e})
}

// AppendEvents implements store.Store.
func (s *Store) AppendEvents(_ context.Context, es []*store.Event) error {
	return s.update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bEvents)
		for _, e := range es {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			e.Seq = int64(seq)
			if err := put(b, seqKey(e.Seq), e); err != nil {
				return err
			}
		}
		return nil
	})
}

// matches reports whether e is one f selects (all but Limit).
func matches(f store.EventFilter, e *store.Event) bool {
	return e.Seq > f.After && (f.Atespace == "" || e.Atespace == f.Atespace) && (f.Actor == "" || e.Actor == f.Actor)
}

// ListEvents implements store.Store. Filtering by actor scans the
// events after f.After: their number is bounded by PruneEvents' keep.
func (s *Store) ListEvents(_ context.Context, f store.EventFilter) (out []*store.Event, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		out = nil
		c := tx.Bucket(bEvents).Cursor()
		if f.Newest && f.Limit > 0 {
			for k, v := c.Last(); k != nil && len(out) < f.Limit; k, v = c.Prev() {
				e, err := decode[store.Event](k, v)
				if err != nil {
					return err
				}
				if e.Seq <= f.After {
					break
				}
				if matches(f, e) {
					out = append(out, e)
				}
			}
			for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
				out[i], out[j] = out[j], out[i]
			}
			return nil
		}
		for k, v := c.Seek(seqKey(f.After + 1)); k != nil && (f.Limit == 0 || len(out) < f.Limit); k, v = c.Next() {
			e, err := decode[store.Event](k, v)
			if err != nil {
				return err
			}
			if matches(f, e) {
				out = append(out, e)
			}
		}
		return nil
	})
	return out, err
}

// PruneEvents implements store.Store.
func (s *Store) PruneEvents(_ context.Context, before time.Time, keep int) (n int, err error) {
	err = s.update(func(tx *bbolt.Tx) error {
		n = 0
		b := tx.Bucket(bEvents)
		total := b.Stats().KeyN
		var doomed [][]byte
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if total-len(doomed) <= keep {
				e, err := decode[store.Event](k, v)
				if err != nil {
					return err
				}
				if !e.Time.Before(before) {
					break
				}
			}
			doomed = append(doomed, bytes.Clone(k))
		}
		for _, k := range doomed {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(doomed)
		return nil
	})
	return n, err
}
