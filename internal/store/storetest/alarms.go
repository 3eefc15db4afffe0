package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

func newAlarm(a *store.Actor, id string, at time.Time) *store.Alarm {
	return &store.Alarm{ID: id, Atespace: a.Atespace, Actor: a.Name, ActorUID: a.UID, Path: "/tick",
		At: at, NextAttempt: at, State: store.AlarmPending, CreateTime: at.Add(-time.Minute)}
}

// testAlarms: create (checks), get, list order and filters, CAS update,
// delete.
func testAlarms(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	a := newActor(t, s, "a", nil)
	b := newActor(t, s, "b", nil)
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

	must(t, s.CreateAlarm(ctx, newAlarm(a, "a2", base.Add(2*time.Second)), 3))
	must(t, s.CreateAlarm(ctx, newAlarm(a, "a1", base.Add(time.Second)), 3))
	must(t, s.CreateAlarm(ctx, newAlarm(b, "b1", base.Add(1500*time.Millisecond)), 3))
	wantErr(t, s.CreateAlarm(ctx, newAlarm(a, "a1", base), 3), store.ErrAlreadyExists)
	stale := newAlarm(a, "x", base)
	stale.ActorUID = "another-incarnation"
	wantErr(t, s.CreateAlarm(ctx, stale, 3), store.ErrNotFound)
	missing := newAlarm(a, "y", base)
	missing.Actor = "nobody"
	wantErr(t, s.CreateAlarm(ctx, missing, 3), store.ErrNotFound)

	for _, tc := range []struct {
		atespace, actor string
		want            []string
	}{
		{"", "", []string{"a1", "b1", "a2"}},
		{"default", "", []string{"a1", "b1", "a2"}},
		{"default", "a", []string{"a1", "a2"}},
		{"default", "b", []string{"b1"}},
		{"other", "", nil},
	} {
		got, err := s.ListAlarms(ctx, tc.atespace, tc.actor)
		must(t, err)
		if ids := alarmIDs(got); fmt.Sprint(ids) != fmt.Sprint(tc.want) {
			t.Errorf("ListAlarms(%q, %q) = %v, want %v", tc.atespace, tc.actor, ids, tc.want)
		}
	}

	got, err := s.GetAlarm(ctx, "a1")
	must(t, err)
	if !got.At.Equal(base.Add(time.Second)) || got.Path != "/tick" || got.ActorUID != a.UID || got.State != store.AlarmPending {
		t.Fatalf("GetAlarm = %+v", got)
	}
	_, err = s.GetAlarm(ctx, "nope")
	wantErr(t, err, store.ErrNotFound)

	next := *got
	next.NextAttempt = base.Add(3 * time.Second)
	next.Attempts, next.Message = 1, "actor answered 503"
	upd, err := s.UpdateAlarm(ctx, &next)
	must(t, err)
	if upd.Version != got.Version+1 {
		t.Fatalf("UpdateAlarm version %d, want %d", upd.Version, got.Version+1)
	}
	_, err = s.UpdateAlarm(ctx, &next) // stale version
	wantErr(t, err, store.ErrConflict)
	reread, err := s.GetAlarm(ctx, "a1")
	must(t, err)
	if reread.Attempts != 1 || reread.Message != "actor answered 503" || reread.Version != upd.Version {
		t.Fatalf("after update: %+v", reread)
	}
	list, err := s.ListAlarms(ctx, "", "")
	must(t, err)
	if ids := alarmIDs(list); fmt.Sprint(ids) != "[b1 a2 a1]" {
		t.Fatalf("order after moving a1's next attempt: %v", ids)
	}

	must(t, s.DeleteAlarm(ctx, "a1"))
	wantErr(t, s.DeleteAlarm(ctx, "a1"), store.ErrNotFound)
	_, err = s.GetAlarm(ctx, "a1")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.UpdateAlarm(ctx, reread)
	wantErr(t, err, store.ErrNotFound)
}

// testAlarmLimitConcurrent: concurrent creates for one actor never exceed
// maxPending; failed alarms do not count.
func testAlarmLimitConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	a := newActor(t, s, "a", nil)
	base := time.Now().Add(time.Hour).UTC()
	const limit, tries = 4, 12
	var wg sync.WaitGroup
	errs := make([]error, tries)
	for i := range tries {
		wg.Go(func() { errs[i] = s.CreateAlarm(ctx, newAlarm(a, fmt.Sprintf("c%02d", i), base), limit) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		default:
			wantErr(t, err, store.ErrTooMany)
		}
	}
	if ok != limit {
		t.Fatalf("%d creates succeeded, want %d", ok, limit)
	}
	// A failed alarm no longer counts.
	list, err := s.ListAlarms(ctx, "default", "a")
	must(t, err)
	failed := *list[0]
	failed.State = store.AlarmFailed
	_, err = s.UpdateAlarm(ctx, &failed)
	must(t, err)
	must(t, s.CreateAlarm(ctx, newAlarm(a, "after-failure", base), limit))
	wantErr(t, s.CreateAlarm(ctx, newAlarm(a, "one-too-many", base), limit), store.ErrTooMany)
}

// testAlarmsGoWithActor: DeleteActor deletes the actor's alarms and no
// other actor's; a re-created actor of that name starts with none.
func testAlarmsGoWithActor(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	a := newActor(t, s, "a", nil)
	b := newActor(t, s, "b", nil)
	at := time.Now().Add(time.Hour).UTC()
	must(t, s.CreateAlarm(ctx, newAlarm(a, "a1", at), 16))
	must(t, s.CreateAlarm(ctx, newAlarm(a, "a2", at), 16))
	must(t, s.CreateAlarm(ctx, newAlarm(b, "b1", at), 16))
	cur, err := s.GetActor(ctx, names.ActorKey{Atespace: "default", Name: "a"})
	must(t, err)
	must(t, s.DeleteActor(ctx, cur))
	list, err := s.ListAlarms(ctx, "", "")
	must(t, err)
	if ids := alarmIDs(list); fmt.Sprint(ids) != "[b1]" {
		t.Fatalf("alarms after deleting actor a: %v, want [b1]", ids)
	}
	_, err = s.GetAlarm(ctx, "a1")
	wantErr(t, err, store.ErrNotFound)
	newActor(t, s, "a", nil)
	list, err = s.ListAlarms(ctx, "default", "a")
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("re-created actor has alarms %v", alarmIDs(list))
	}
	// The id is free again.
	must(t, s.CreateAlarm(ctx, newAlarm(a, "a1", at), 16))
}

func alarmIDs(as []*store.Alarm) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.ID)
	}
	return out
}
