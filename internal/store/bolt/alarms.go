package bolt

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	bbolt "go.etcd.io/bbolt"

	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// alarmPrefix is the prefix of the keys of k's alarms in bAlarms.
func alarmPrefix(k names.ActorKey) []byte { return []byte(k.String() + "\x00") }

// alarmKey is a's key in bAlarms.
func alarmKey(a *store.Alarm) []byte { return append(alarmPrefix(a.Key()), a.ID...) }

// CreateAlarm implements store.Store.
func (s *Store) CreateAlarm(_ context.Context, a *store.Alarm, maxPending int) error {
	return s.update(func(tx *bbolt.Tx) error {
		act, err := get[store.Actor](tx.Bucket(bActors), actorKey(a.Key()))
		if err != nil || act.UID != a.ActorUID {
			return fmt.Errorf("actor %s (uid %s): %w", a.Key(), a.ActorUID, store.ErrNotFound)
		}
		ids := tx.Bucket(bAlarmIDs)
		if ids.Get([]byte(a.ID)) != nil {
			return fmt.Errorf("alarm %s: %w", a.ID, store.ErrAlreadyExists)
		}
		pending := 0
		prefix := alarmPrefix(a.Key())
		c := tx.Bucket(bAlarms).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			cur, err := decode[store.Alarm](k, v)
			if err != nil {
				return err
			}
			if cur.State == store.AlarmPending {
				pending++
			}
		}
		if pending >= maxPending {
			return fmt.Errorf("actor %s has %d pending alarms, at most %d are allowed: %w", a.Key(), pending, maxPending, store.ErrTooMany)
		}
		k := alarmKey(a)
		if err := ids.Put([]byte(a.ID), k); err != nil {
			return err
		}
		return put(tx.Bucket(bAlarms), k, a)
	})
}

// GetAlarm implements store.Store.
func (s *Store) GetAlarm(_ context.Context, id string) (out *store.Alarm, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		k := tx.Bucket(bAlarmIDs).Get([]byte(id))
		if k == nil {
			return fmt.Errorf("alarm %s: %w", id, store.ErrNotFound)
		}
		out, err = get[store.Alarm](tx.Bucket(bAlarms), k)
		return err
	})
	return out, err
}

// ListAlarms implements store.Store.
func (s *Store) ListAlarms(_ context.Context, atespace, actor string) (out []*store.Alarm, err error) {
	var prefix []byte
	switch {
	case actor != "":
		prefix = alarmPrefix(names.ActorKey{Atespace: atespace, Name: actor})
	case atespace != "":
		prefix = []byte(atespace + "/")
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		out = nil
		c := tx.Bucket(bAlarms).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			a, err := decode[store.Alarm](k, v)
			if err != nil {
				return err
			}
			out = append(out, a)
		}
		return nil
	})
	sortAlarms(out)
	return out, err
}

// sortAlarms orders alarms as ListAlarms returns them.
func sortAlarms(as []*store.Alarm) {
	slices.SortFunc(as, func(a, b *store.Alarm) int {
		if c := a.NextAttempt.Compare(b.NextAttempt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// UpdateAlarm implements store.Store.
func (s *Store) UpdateAlarm(_ context.Context, a *store.Alarm) (out *store.Alarm, err error) {
	err = s.update(func(tx *bbolt.Tx) error {
		k := tx.Bucket(bAlarmIDs).Get([]byte(a.ID))
		if k == nil {
			return fmt.Errorf("alarm %s: %w", a.ID, store.ErrNotFound)
		}
		cur, err := get[store.Alarm](tx.Bucket(bAlarms), k)
		if err != nil {
			return err
		}
		if cur.Version != a.Version || cur.Key() != a.Key() {
			return fmt.Errorf("alarm %s (version %d, stored %d): %w", a.ID, a.Version, cur.Version, store.ErrConflict)
		}
		n := *a
		n.Version++
		out = &n
		return put(tx.Bucket(bAlarms), k, &n)
	})
	return out, err
}

// DeleteAlarm implements store.Store.
func (s *Store) DeleteAlarm(_ context.Context, id string) error {
	return s.update(func(tx *bbolt.Tx) error {
		ids := tx.Bucket(bAlarmIDs)
		k := ids.Get([]byte(id))
		if k == nil {
			return fmt.Errorf("alarm %s: %w", id, store.ErrNotFound)
		}
		k = bytes.Clone(k)
		if err := tx.Bucket(bAlarms).Delete(k); err != nil {
			return err
		}
		return ids.Delete([]byte(id))
	})
}

// deleteAlarmsOf deletes every alarm of actor k.
func deleteAlarmsOf(tx *bbolt.Tx, k names.ActorKey) error {
	prefix := alarmPrefix(k)
	b, ids := tx.Bucket(bAlarms), tx.Bucket(bAlarmIDs)
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
		if err := ids.Delete(k[len(prefix):]); err != nil {
			return err
		}
	}
	return nil
}
