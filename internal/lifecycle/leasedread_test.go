package lifecycle

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// leasingStore is a store.ActorLeaser over a store without one,
// counting the actor and template reads the workflows make themselves.
type leasingStore struct {
	store.Store
	leased, actorReads, templateReads atomic.Int32
}

func (s *leasingStore) LeaseActor(ctx context.Context, lease string, key names.ActorKey, holder string, ttl time.Duration, takeOver bool) (*store.Lease, *store.Actor, *store.Template, error) {
	s.leased.Add(1)
	take := s.Store.AcquireLease
	if takeOver {
		take = s.Store.TakeOverLease
	}
	l, err := take(ctx, lease, holder, ttl)
	if err != nil {
		return nil, nil, nil, err
	}
	a, err := s.Store.GetActor(ctx, key)
	if err != nil {
		return l, nil, nil, nil
	}
	t, err := s.Store.GetTemplate(ctx, a.Atespace, a.Template)
	if err != nil {
		return l, a, nil, nil
	}
	return l, a, t, nil
}

func (s *leasingStore) GetActor(ctx context.Context, key names.ActorKey) (*store.Actor, error) {
	s.actorReads.Add(1)
	return s.Store.GetActor(ctx, key)
}

func (s *leasingStore) GetTemplate(ctx context.Context, atespace, name string) (*store.Template, error) {
	s.templateReads.Add(1)
	return s.Store.GetTemplate(ctx, atespace, name)
}

// TestWorkflowsReadWhatTheLeaseBrought: over a store whose lease brings
// the actor and its template along (store.ActorLeaser: PostgreSQL), a
// wake-up — a resume, then a suspend — reads neither again, which over
// PostgreSQL saves two round trips per workflow (issue 33); and a
// workflow on an actor that does not exist still answers NotFound.
func TestWorkflowsReadWhatTheLeaseBrought(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	st := &leasingStore{Store: e.st}
	m := New(st, testNodes{n: e.node, live: []string{"n1"}}, e.snaps, "replica", nil)
	t.Cleanup(m.Close)

	if a, err := m.Resume(ctx, key("a")); err != nil || a.State != store.Running {
		t.Fatalf("resume: %+v, %v; want RUNNING", a, err)
	}
	if a, err := m.Suspend(ctx, key("a")); err != nil || a.State != store.Suspended {
		t.Fatalf("suspend: %+v, %v; want SUSPENDED", a, err)
	}
	if n := st.leased.Load(); n != 2 {
		t.Errorf("%d leases taken through LeaseActor, want 2 (resume, suspend)", n)
	}
	if a, tpl := st.actorReads.Load(), st.templateReads.Load(); a != 0 || tpl != 0 {
		t.Errorf("the wake-up read the actor %d times and its template %d times itself; the lease brought both", a, tpl)
	}

	if _, err := m.Resume(ctx, key("nobody")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("resuming an actor that does not exist: %v, want ErrNotFound", err)
	}
}
