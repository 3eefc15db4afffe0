// Package bolt is the embedded Store backend: one bbolt file in the data
// directory. Every operation runs inside one bbolt transaction, so
// compare-and-set and the worker claim are atomic; bbolt serialises
// writers, which is what makes them correct without further locking.
// Concurrent writes share a transaction (group commit, commit.go), so a
// write's function may run more than once and must derive its results
// from the transaction alone each time.
//
// Records are JSON, encoded by internal/codec (which says why its
// implementation was chosen). An actor's key is its names.ActorKey's
// string, "<atespace>/<name>", so an atespace's actors share a prefix.
package bolt

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/codec"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

var (
	bAtespaces = []byte("atespaces")
	bTemplates = []byte("templates")
	bActors    = []byte("actors")
	bWorkers   = []byte("workers")
	// bFree indexes free workers by freeKey (node, then name), so a claim
	// never scans claimed workers and a claim on one node seeks straight
	// to that node's free ones.
	bFree   = []byte("freeWorkers")
	bLeases = []byte("leases")
	bMeta   = []byte("meta")
	// bAlarms holds alarms by "<atespace>/<actor>\x00<id>", so an actor's
	// alarms share a prefix; bAlarmIDs maps an id to that key.
	bAlarms   = []byte("alarms")
	bAlarmIDs = []byte("alarmIds")
	// bTags holds tags by "<atespace>/<name>".
	bTags = []byte("tags")
	// bIngressTokens holds ingress tokens by "<atespace>/<name>".
	bIngressTokens = []byte("ingressTokens")
	// bRoleBindings holds role bindings by name.
	bRoleBindings = []byte("roleBindings")

	kLeaseToken = []byte("leaseToken")
)

// Store is a bbolt-backed store.Store. Safe for concurrent use.
type Store struct {
	db *bbolt.DB
	// writes group-commits every write transaction (commit.go).
	writes *committer
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database file at path. It fails after
// timeout if another process holds the file's lock.
func Open(path string, timeout time.Duration) (*Store, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, b := range [][]byte{bAtespaces, bTemplates, bActors, bWorkers, bFree, bLeases, bMeta, bAlarms, bAlarmIDs, bTags, bEvents, bSigningKeys, bIngressTokens, bRoleBindings, bNodeDrains} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return rebuildFree(tx)
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("init store %s: %w", path, err)
	}
	return &Store{db: db, writes: newCommitter(db)}, nil
}

// Close waits for queued writes and closes the database file; writes
// after Close fail.
func (s *Store) Close() error {
	s.writes.close()
	return s.db.Close()
}

// update runs fn in a write transaction that concurrent writes may share
// (committer); fn may run more than once and must set its results anew
// each time.
func (s *Store) update(fn func(*bbolt.Tx) error) error { return s.writes.update(fn) }

var _ store.CommitObserved = (*Store)(nil)

// SetCommitObserver implements store.CommitObserved: o learns of every
// group-commit transaction that commits (its writes and duration).
func (s *Store) SetCommitObserver(o store.CommitObserver) {
	if o == nil {
		s.writes.observer.Store(nil)
		return
	}
	s.writes.observer.Store(&o)
}

// key2 is a template's key, "<atespace>/<name>" like an actor's.
func key2(a, b string) []byte { return []byte(a + "/" + b) }

// actorKey is an actor's key in bActors.
func actorKey(k names.ActorKey) []byte { return []byte(k.String()) }

// freeKey is w's key in bFree: node and name joined by a NUL byte, which
// no DNS-1123 name contains, so a node's free workers share one prefix.
func freeKey(w *store.Worker) []byte { return []byte(w.Node + "\x00" + w.Name) }

// rebuildFree recreates bFree from the workers, at every Open: cheap (one
// pass over the workers) and it upgrades files whose index was keyed by
// name alone.
func rebuildFree(tx *bbolt.Tx) error {
	if err := tx.DeleteBucket(bFree); err != nil {
		return err
	}
	free, err := tx.CreateBucket(bFree)
	if err != nil {
		return err
	}
	return tx.Bucket(bWorkers).ForEach(func(k, v []byte) error {
		w, err := decode[store.Worker](k, v)
		if err != nil {
			return err
		}
		if w.Free() {
			return free.Put(freeKey(w), nil)
		}
		return nil
	})
}

func get[T any](b *bbolt.Bucket, k []byte) (*T, error) {
	v := b.Get(k)
	if v == nil {
		return nil, store.ErrNotFound
	}
	return decode[T](k, v)
}

// decode decodes the record v stored under k.
func decode[T any](k, v []byte) (*T, error) {
	var out T
	if err := codec.Unmarshal(v, &out); err != nil {
		return nil, fmt.Errorf("decode %s: %w", k, err)
	}
	return &out, nil
}

func put(b *bbolt.Bucket, k []byte, v any) error {
	data, err := codec.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", k, err)
	}
	return b.Put(k, data)
}

// hasPrefix reports whether bucket b holds any key starting with prefix.
func hasPrefix(b *bbolt.Bucket, prefix []byte) bool {
	k, _ := b.Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

// CreateAtespace implements store.Store.
func (s *Store) CreateAtespace(_ context.Context, a *store.Atespace) error {
	return s.update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bAtespaces)
		if b.Get([]byte(a.Name)) != nil {
			return fmt.Errorf("atespace %s: %w", a.Name, store.ErrAlreadyExists)
		}
		return put(b, []byte(a.Name), a)
	})
}

// GetAtespace implements store.Store.
func (s *Store) GetAtespace(_ context.Context, name string) (out *store.Atespace, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		out, err = get[store.Atespace](tx.Bucket(bAtespaces), []byte(name))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("atespace %s: %w", name, err)
	}
	return out, nil
}

// ListAtespaces implements store.Store.
func (s *Store) ListAtespaces(_ context.Context) (out []*store.Atespace, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bAtespaces).ForEach(func(k, _ []byte) error {
			a, err := get[store.Atespace](tx.Bucket(bAtespaces), k)
			out = append(out, a)
			return err
		})
	})
	return out, err
}

// DeleteAtespace implements store.Store.
func (s *Store) DeleteAtespace(_ context.Context, name string) error {
	return s.update(func(tx *bbolt.Tx) error {
		if tx.Bucket(bAtespaces).Get([]byte(name)) == nil {
			return fmt.Errorf("atespace %s: %w", name, store.ErrNotFound)
		}
		prefix := []byte(name + "/")
		if hasPrefix(tx.Bucket(bTags), prefix) {
			return fmt.Errorf("atespace %s holds tags (ate get tags -n %s): %w", name, name, store.ErrNotEmpty)
		}
		if hasPrefix(tx.Bucket(bActors), prefix) || hasPrefix(tx.Bucket(bTemplates), prefix) {
			return fmt.Errorf("atespace %s holds actors or templates: %w", name, store.ErrNotEmpty)
		}
		if err := deleteIngressTokens(tx, name); err != nil {
			return err
		}
		return tx.Bucket(bAtespaces).Delete([]byte(name))
	})
}

// templateRecord is a Template with its spec in protobuf wire form, since
// the spec is an API message.
type templateRecord struct {
	store.Template
	SpecProto []byte `json:"spec"`
}

func getTemplate(tx *bbolt.Tx, k []byte) (*store.Template, error) {
	r, err := get[templateRecord](tx.Bucket(bTemplates), k)
	if err != nil {
		return nil, err
	}
	t := r.Template
	t.Spec = &atev1.ActorTemplateSpec{}
	if err := proto.Unmarshal(r.SpecProto, t.Spec); err != nil {
		return nil, fmt.Errorf("decode template %s spec: %w", k, err)
	}
	return &t, nil
}

func putTemplate(tx *bbolt.Tx, t *store.Template) error {
	spec, err := proto.Marshal(t.Spec)
	if err != nil {
		return fmt.Errorf("encode template spec: %w", err)
	}
	return put(tx.Bucket(bTemplates), key2(t.Atespace, t.Name), templateRecord{Template: *t, SpecProto: spec})
}

// CreateTemplate implements store.Store.
func (s *Store) CreateTemplate(_ context.Context, t *store.Template) error {
	return s.update(func(tx *bbolt.Tx) error {
		if tx.Bucket(bAtespaces).Get([]byte(t.Atespace)) == nil {
			return fmt.Errorf("atespace %s: %w", t.Atespace, store.ErrNotFound)
		}
		if tx.Bucket(bTemplates).Get(key2(t.Atespace, t.Name)) != nil {
			return fmt.Errorf("template %s/%s: %w", t.Atespace, t.Name, store.ErrAlreadyExists)
		}
		return putTemplate(tx, t)
	})
}

// GetTemplate implements store.Store.
func (s *Store) GetTemplate(_ context.Context, atespace, name string) (out *store.Template, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		out, err = getTemplate(tx, key2(atespace, name))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("template %s/%s: %w", atespace, name, err)
	}
	return out, nil
}

// ListTemplates implements store.Store.
func (s *Store) ListTemplates(_ context.Context, atespace string) (out []*store.Template, err error) {
	prefix := []byte(atespace + "/")
	if atespace == "" {
		prefix = nil
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bTemplates).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			t, err := getTemplate(tx, k)
			if err != nil {
				return err
			}
			out = append(out, t)
		}
		return nil
	})
	return out, err
}

// UpdateTemplateStatus implements store.Store.
func (s *Store) UpdateTemplateStatus(_ context.Context, t *store.Template) (out *store.Template, err error) {
	err = s.update(func(tx *bbolt.Tx) error {
		cur, err := getTemplate(tx, key2(t.Atespace, t.Name))
		if err != nil {
			return fmt.Errorf("template %s/%s: %w", t.Atespace, t.Name, err)
		}
		if cur.UID != t.UID || cur.Version != t.Version {
			return fmt.Errorf("template %s/%s: %w", t.Atespace, t.Name, store.ErrConflict)
		}
		cur.SetStatus(t)
		cur.Version++
		out = cur
		return putTemplate(tx, cur)
	})
	return out, err
}

// DeleteTemplate implements store.Store. Finding users scans the
// atespace's actors; deletes are rare and never on the request path.
func (s *Store) DeleteTemplate(_ context.Context, atespace, name string) error {
	return s.update(func(tx *bbolt.Tx) error {
		k := key2(atespace, name)
		if tx.Bucket(bTemplates).Get(k) == nil {
			return fmt.Errorf("template %s/%s: %w", atespace, name, store.ErrNotFound)
		}
		prefix := []byte(atespace + "/")
		c := tx.Bucket(bActors).Cursor()
		for ak, v := c.Seek(prefix); ak != nil && bytes.HasPrefix(ak, prefix); ak, v = c.Next() {
			var a store.Actor
			if err := codec.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("decode %s: %w", ak, err)
			}
			if a.Template == name {
				return fmt.Errorf("template %s/%s is used by actor %s: %w", atespace, name, a.Name, store.ErrNotEmpty)
			}
		}
		tag, err := tagOfTemplate(tx, atespace, name)
		if err != nil {
			return err
		}
		if tag != "" {
			return fmt.Errorf("template %s/%s is used by tag %s: %w", atespace, name, tag, store.ErrNotEmpty)
		}
		return tx.Bucket(bTemplates).Delete(k)
	})
}

// CreateActor implements store.Store.
func (s *Store) CreateActor(_ context.Context, a *store.Actor) error {
	return s.update(func(tx *bbolt.Tx) error {
		if tx.Bucket(bAtespaces).Get([]byte(a.Atespace)) == nil {
			return fmt.Errorf("atespace %s: %w", a.Atespace, store.ErrNotFound)
		}
		if tx.Bucket(bTemplates).Get(key2(a.Atespace, a.Template)) == nil {
			return fmt.Errorf("template %s/%s: %w", a.Atespace, a.Template, store.ErrNotFound)
		}
		k := actorKey(a.Key())
		if tx.Bucket(bActors).Get(k) != nil {
			return fmt.Errorf("actor %s: %w", k, store.ErrAlreadyExists)
		}
		return put(tx.Bucket(bActors), k, a)
	})
}

// GetActor implements store.Store.
func (s *Store) GetActor(_ context.Context, key names.ActorKey) (out *store.Actor, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		out, err = get[store.Actor](tx.Bucket(bActors), actorKey(key))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("actor %s: %w", key, err)
	}
	return out, nil
}

// ListActors implements store.Store. The page token is the last key
// returned, base64-encoded, so a page costs O(pageSize) whatever the total.
func (s *Store) ListActors(_ context.Context, atespace string, pageSize int, pageToken string) (out []*store.Actor, next string, err error) {
	var prefix []byte
	if atespace != "" {
		prefix = []byte(atespace + "/")
	}
	after, err := base64.RawURLEncoding.DecodeString(pageToken)
	if err != nil || (pageToken != "" && !bytes.HasPrefix(after, prefix)) {
		return nil, "", fmt.Errorf("invalid page token %q", pageToken)
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bActors).Cursor()
		k, v := c.Seek(prefix)
		if len(after) > 0 {
			k, v = c.Seek(after)
			if bytes.Equal(k, after) {
				k, v = c.Next()
			}
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if len(out) == pageSize {
				next = base64.RawURLEncoding.EncodeToString(actorKey(out[len(out)-1].Key()))
				return nil
			}
			var a store.Actor
			if err := codec.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("decode %s: %w", k, err)
			}
			out = append(out, &a)
		}
		return nil
	})
	return out, next, err
}

// casActor loads the stored actor and checks a's UID and Version against it.
func casActor(tx *bbolt.Tx, a *store.Actor) (*store.Actor, error) {
	cur, err := get[store.Actor](tx.Bucket(bActors), actorKey(a.Key()))
	if err != nil {
		return nil, fmt.Errorf("actor %s: %w", a.Key(), err)
	}
	if cur.UID != a.UID || cur.Version != a.Version {
		return nil, fmt.Errorf("actor %s (version %d, stored %d): %w", a.Key(), a.Version, cur.Version, store.ErrConflict)
	}
	return cur, nil
}

// UpdateActor implements store.Store.
func (s *Store) UpdateActor(ctx context.Context, a *store.Actor) (out *store.Actor, err error) {
	err = s.update(func(tx *bbolt.Tx) error {
		if err := checkFence(ctx, tx); err != nil {
			return err
		}
		cur, err := casActor(tx, a)
		if err != nil {
			return err
		}
		if a.Template != cur.Template && tx.Bucket(bTemplates).Get(key2(a.Atespace, a.Template)) == nil {
			return fmt.Errorf("actor %s: template %s: %w", a.Key(), a.Template, store.ErrNotFound)
		}
		if a.Worker != "" {
			w, err := get[store.Worker](tx.Bucket(bWorkers), []byte(a.Worker))
			if a.Worker != cur.Worker || err != nil || w.ActorUID != a.UID {
				return fmt.Errorf("actor %s: worker %s is not held by it: %w", a.Key(), a.Worker, store.ErrConflict)
			}
		}
		if cur.Worker != "" && cur.Worker != a.Worker {
			if err := release(tx, cur.Worker, cur.UID); err != nil {
				return err
			}
		}
		n := *a
		n.Version++
		out = &n
		return put(tx.Bucket(bActors), actorKey(a.Key()), &n)
	})
	return out, err
}

// ClaimWorker implements store.Store.
func (s *Store) ClaimWorker(ctx context.Context, a *store.Actor, node string, prefer ...string) (outA *store.Actor, outW *store.Worker, err error) {
	err = s.update(func(tx *bbolt.Tx) error {
		if err := checkFence(ctx, tx); err != nil {
			return err
		}
		if _, err := casActor(tx, a); err != nil {
			return err
		}
		free, workers := tx.Bucket(bFree), tx.Bucket(bWorkers)
		// take claims w (free, fitting) under free-index key k.
		take := func(k []byte, w *store.Worker) error {
			w.ActorUID, w.Actor = a.UID, a.Key()
			if err := put(workers, []byte(w.Name), w); err != nil {
				return err
			}
			if err := free.Delete(k); err != nil {
				return err
			}
			n := *a
			n.State, n.Worker, n.Version = store.Resuming, w.Name, a.Version+1
			n.StateTime = time.Now().UTC()
			outA, outW = &n, w
			return put(tx.Bucket(bActors), actorKey(a.Key()), &n)
		}
		for _, name := range prefer {
			w, err := get[store.Worker](workers, []byte(name))
			if err != nil || (node != "" && w.Node != node) || !store.MatchLabels(a.WorkerSelector, w.Labels) {
				continue
			}
			if w.Free() { // every write keeps the free index in step
				return take(freeKey(w), w)
			}
		}
		// With a node, seek to its free workers; without, take the first
		// free one. Only a worker selector makes this walk past workers
		// that do not fit.
		var prefix []byte
		if node != "" {
			prefix = freeKey(&store.Worker{Node: node})
		}
		c := free.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			_, name, _ := bytes.Cut(k, []byte{0})
			w, err := get[store.Worker](workers, name)
			if err != nil {
				return fmt.Errorf("free worker %s: %w", name, err)
			}
			if store.MatchLabels(a.WorkerSelector, w.Labels) {
				return take(k, w)
			}
		}
		return fmt.Errorf("actor %s: %w", a.Key(), store.ErrNoFreeWorker)
	})
	return outA, outW, err
}

// RecordActivity implements store.Store.
func (s *Store) RecordActivity(_ context.Context, acts []names.Activity) error {
	return s.update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bActors)
		for _, act := range acts {
			k := actorKey(act.Actor)
			a, err := get[store.Actor](b, k)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if !act.Last.After(a.LastActivity) {
				continue
			}
			a.LastActivity = act.Last
			a.Version++
			if err := put(b, k, a); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteActor implements store.Store.
func (s *Store) DeleteActor(ctx context.Context, a *store.Actor) error {
	return s.update(func(tx *bbolt.Tx) error {
		if err := checkFence(ctx, tx); err != nil {
			return err
		}
		cur, err := casActor(tx, a)
		if err != nil {
			return err
		}
		if cur.Worker != "" {
			if err := release(tx, cur.Worker, cur.UID); err != nil {
				return err
			}
		}
		if err := deleteAlarmsOf(tx, a.Key()); err != nil {
			return err
		}
		return tx.Bucket(bActors).Delete(actorKey(a.Key()))
	})
}

// release frees worker name if actorUID holds it.
func release(tx *bbolt.Tx, name, actorUID string) error {
	w, err := get[store.Worker](tx.Bucket(bWorkers), []byte(name))
	if err != nil {
		// The worker was unregistered; nothing to free.
		return nil
	}
	if w.ActorUID != actorUID {
		return nil
	}
	w.ActorUID, w.Actor = "", names.ActorKey{}
	if err := put(tx.Bucket(bWorkers), []byte(name), w); err != nil {
		return err
	}
	return tx.Bucket(bFree).Put(freeKey(w), nil)
}

// PutWorker implements store.Store.
func (s *Store) PutWorker(_ context.Context, w *store.Worker) error {
	return s.update(func(tx *bbolt.Tx) error {
		n := *w
		if cur, err := get[store.Worker](tx.Bucket(bWorkers), []byte(w.Name)); err == nil {
			n.ActorUID, n.Actor = cur.ActorUID, cur.Actor
			// The node may have changed; the entry goes under the new one.
			if err := tx.Bucket(bFree).Delete(freeKey(cur)); err != nil {
				return err
			}
		}
		if err := put(tx.Bucket(bWorkers), []byte(w.Name), &n); err != nil {
			return err
		}
		if n.Free() {
			return tx.Bucket(bFree).Put(freeKey(&n), nil)
		}
		return nil
	})
}

// GetWorker implements store.Store.
func (s *Store) GetWorker(_ context.Context, name string) (out *store.Worker, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		out, err = get[store.Worker](tx.Bucket(bWorkers), []byte(name))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", name, err)
	}
	return out, nil
}

// ListWorkers implements store.Store.
func (s *Store) ListWorkers(_ context.Context) (out []*store.Worker, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bWorkers).ForEach(func(k, _ []byte) error {
			w, err := get[store.Worker](tx.Bucket(bWorkers), k)
			out = append(out, w)
			return err
		})
	})
	return out, err
}

// DeleteWorker implements store.Store.
func (s *Store) DeleteWorker(_ context.Context, name string) error {
	return s.update(func(tx *bbolt.Tx) error {
		if cur, err := get[store.Worker](tx.Bucket(bWorkers), []byte(name)); err == nil {
			if !cur.Free() {
				return fmt.Errorf("worker %s is held by actor %s: %w", name, cur.ActorUID, store.ErrConflict)
			}
			if err := tx.Bucket(bFree).Delete(freeKey(cur)); err != nil {
				return err
			}
		}
		return tx.Bucket(bWorkers).Delete([]byte(name))
	})
}

// ReleaseWorker implements store.Store.
func (s *Store) ReleaseWorker(ctx context.Context, name, actorUID string) error {
	return s.update(func(tx *bbolt.Tx) error {
		if err := checkFence(ctx, tx); err != nil {
			return err
		}
		return release(tx, name, actorUID)
	})
}

// AcquireLease implements store.Store.
func (s *Store) AcquireLease(_ context.Context, key, holder string, ttl time.Duration) (*store.Lease, error) {
	return s.acquireLease(key, holder, ttl, false)
}

// TakeOverLease implements store.Store.
func (s *Store) TakeOverLease(_ context.Context, key, holder string, ttl time.Duration) (*store.Lease, error) {
	return s.acquireLease(key, holder, ttl, true)
}

// acquireLease takes key's lease for holder if it is absent, expired or
// holder's, or, with takeOver, held by a holder whose heartbeat
// (store.HolderKey) has expired.
func (s *Store) acquireLease(key, holder string, ttl time.Duration, takeOver bool) (out *store.Lease, err error) {
	err = s.update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bLeases)
		now := time.Now()
		from := ""
		if cur, err := get[store.Lease](b, []byte(key)); err == nil && cur.Holder != holder {
			if now.Before(cur.Expiry) {
				hb, herr := get[store.Lease](b, []byte(store.HolderKey(cur.Holder)))
				if !takeOver || herr != nil || hb.Holder != cur.Holder || now.Before(hb.Expiry) {
					return fmt.Errorf("lease %s held by %s: %w", key, cur.Holder, store.ErrLeaseHeld)
				}
			}
			from = cur.Holder
		}
		var token int64
		if v := tx.Bucket(bMeta).Get(kLeaseToken); v != nil {
			if err := codec.Unmarshal(v, &token); err != nil {
				return fmt.Errorf("decode lease token: %w", err)
			}
		}
		token++
		if err := put(tx.Bucket(bMeta), kLeaseToken, token); err != nil {
			return err
		}
		out = &store.Lease{Key: key, Holder: holder, Token: token, Expiry: now.Add(ttl), TakenFrom: from}
		return put(b, []byte(key), out)
	})
	return out, err
}

// RenewLease implements store.Store.
func (s *Store) RenewLease(ctx context.Context, key, holder string, token int64, ttl time.Duration) (*store.Lease, error) {
	// A renewal gives up with ctx while the commits queued before it
	// take long (seen: 6.5 s without a commit under a burst of 70
	// restores on two cores). The node registry renews on a heartbeat
	// under a deadline, and waiting here kept it from hearing the node's
	// next heartbeats until it declared its own `ate up` node lost
	// (BENCHMARKS.md, Issue 35's other targets). renewed is read only
	// once the write has committed, never after giving up on it.
	var renewed *store.Lease
	err := s.writes.updateUnlessDone(ctx, func(tx *bbolt.Tx) error {
		now := time.Now()
		cur, err := liveLease(tx, store.Fence{Key: key, Holder: holder, Token: token}, now)
		if err != nil {
			return err
		}
		cur.Expiry = now.Add(ttl)
		renewed = cur
		return put(tx.Bucket(bLeases), []byte(key), cur)
	})
	if err != nil {
		return nil, err
	}
	return renewed, nil
}

// checkFence fails with store.ErrFenced unless the fence ctx carries, if
// any, names a live lease. It runs inside the write's function, so
// bbolt's single writer makes the check and the write one step: no
// takeover can fall between them.
func checkFence(ctx context.Context, tx *bbolt.Tx) error {
	f, ok := store.FenceFrom(ctx)
	if !ok {
		return nil
	}
	_, err := liveLease(tx, f, time.Now())
	return err
}

// liveLease returns f's lease if f.Holder holds it with f.Token and it
// has not expired at now; store.ErrFenced otherwise.
func liveLease(tx *bbolt.Tx, f store.Fence, now time.Time) (*store.Lease, error) {
	cur, err := get[store.Lease](tx.Bucket(bLeases), []byte(f.Key))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("lease %s of %s (token %d) is gone: %w", f.Key, f.Holder, f.Token, store.ErrFenced)
	case err != nil:
		return nil, err
	case cur.Holder != f.Holder || cur.Token != f.Token:
		return nil, fmt.Errorf("lease %s of %s (token %d) is now %s's (token %d): %w", f.Key, f.Holder, f.Token, cur.Holder, cur.Token, store.ErrFenced)
	case !now.Before(cur.Expiry):
		return nil, fmt.Errorf("lease %s of %s (token %d) expired at %s: %w", f.Key, f.Holder, f.Token, cur.Expiry.Format(time.RFC3339Nano), store.ErrFenced)
	}
	return cur, nil
}

// ReleaseLease implements store.Store.
func (s *Store) ReleaseLease(_ context.Context, key, holder string) error {
	return s.update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bLeases)
		cur, err := get[store.Lease](b, []byte(key))
		if err != nil || cur.Holder != holder {
			return nil
		}
		return b.Delete([]byte(key))
	})
}

// String describes the store for logs.
func (s *Store) String() string { return "bolt:" + strings.TrimSpace(s.db.Path()) }
