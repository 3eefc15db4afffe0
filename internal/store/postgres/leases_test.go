package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// TestLeaseActor: a workflow's lease comes with its actor and the
// actor's template in one round trip (issue 33: the lease, the actor and
// the template were three); a lease held by another is refused as by
// AcquireLease; an actor that does not exist still gets its lease, with
// no record, for the caller's own read to report.
func TestLeaseActor(t *testing.T) {
	ctx := context.Background()
	trips := &tripCounter{}
	s := openCounted(t, trips)
	// Another tenant's template of the same name, stored first, must not
	// come along.
	if err := s.CreateAtespace(ctx, &store.Atespace{Name: "other", UID: "other-ns"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTemplate(ctx, &store.Template{Atespace: "other", Name: "tpl", UID: "other-t", Spec: &atev1.ActorTemplateSpec{}}); err != nil {
		t.Fatal(err)
	}
	a := seedActor(t, s, "a")

	var l *store.Lease
	var got *store.Actor
	var tpl *store.Template
	var err error
	sent := trips.during(func() { l, got, tpl, err = s.LeaseActor(ctx, "actor/default/a", a.Key(), "r1", time.Minute, false) })
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 {
		t.Errorf("LeaseActor made %d round trips, want 1; they began:\n%s", len(sent), strings.Join(sent, "\n"))
	}
	if l.Holder != "r1" || l.Token == 0 || !l.Expiry.After(time.Now()) {
		t.Errorf("lease %+v, want r1's with a token, unexpired", l)
	}
	if got == nil || got.UID != a.UID || got.Version != a.Version || got.State != store.Suspended {
		t.Errorf("actor %+v, want %+v", got, a)
	}
	if tpl == nil || tpl.Atespace != "default" || tpl.Name != "tpl" || tpl.UID != "t" || tpl.Spec == nil {
		t.Errorf("template %+v, want default/tpl (uid t) with its spec, not another atespace's", tpl)
	}

	if _, _, _, err := s.LeaseActor(ctx, "actor/default/a", a.Key(), "r2", time.Minute, false); !errors.Is(err, store.ErrLeaseHeld) || !strings.Contains(err.Error(), "r1") {
		t.Errorf("r2 leasing r1's actor: %v, want ErrLeaseHeld naming r1", err)
	}
	// Taking it again, as its holder, gives a new token.
	again, _, _, err := s.LeaseActor(ctx, "actor/default/a", a.Key(), "r1", time.Minute, false)
	if err != nil || again.Token <= l.Token {
		t.Errorf("r1 leasing again: %+v, %v; want a token above %d", again, err, l.Token)
	}

	missing := names.ActorKey{Atespace: "default", Name: "nobody"}
	l, got, tpl, err = s.LeaseActor(ctx, "actor/default/nobody", missing, "r1", time.Minute, false)
	if err != nil || l == nil || got != nil || tpl != nil {
		t.Errorf("leasing an actor that does not exist: %+v, %+v, %+v, %v; want the lease alone", l, got, tpl, err)
	}
}

// TestLeaseActorSeesTheWriteItWaitedFor: an acquisition that waits for
// the lease row — a takeover waits so for a fenced write of the old
// holder, whose fence check locks the row FOR SHARE until it commits —
// returns the actor as that write left it, not as it was when the
// acquisition began. One statement cannot do this (it reads from the
// snapshot it began with), so the read is a statement of its own.
func TestLeaseActorSeesTheWriteItWaitedFor(t *testing.T) {
	t.Run("server defaults", func(t *testing.T) { leaseWaitedFor(t, "") })
	// A database whose default is another isolation level: the store's
	// transactions stay READ COMMITTED all the same.
	t.Run("database default repeatable read", func(t *testing.T) { leaseWaitedFor(t, "repeatable read") })
}

func leaseWaitedFor(t *testing.T, isolation string) {
	ctx := context.Background()
	url := srv.NewDatabase(t)
	if isolation != "" {
		admin := connect(t, url)
		var db string
		if err := admin.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s SET default_transaction_isolation = '%s'`, pgx.Identifier{db}.Sanitize(), isolation)); err != nil {
			t.Fatal(err)
		}
	}
	s := openStore(t, url)
	a := seedActor(t, s, "a")
	l, _, _, err := s.LeaseActor(ctx, "actor/default/a", a.Key(), "r1", time.Minute, false)
	if err != nil {
		t.Fatal(err)
	}

	// A write under the lease, held open after its fence check: the
	// lease row stays locked FOR SHARE.
	writer := connect(t, url)
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var one int
	if err := tx.QueryRow(ctx, fenceQuery, l.Key, l.Holder, l.Token).Scan(&one); err != nil {
		t.Fatal(err)
	}

	// r1 takes the lease again: its acquisition must wait for that
	// lock, as a takeover would.
	type leased struct {
		actor *store.Actor
		err   error
	}
	done := make(chan leased, 1)
	go func() {
		_, got, _, err := s.LeaseActor(ctx, "actor/default/a", a.Key(), "r1", time.Minute, false)
		done <- leased{got, err}
	}()
	watcher := connect(t, url)
	waitFor(t, "the acquisition to wait for the lease row", func() bool {
		var n int
		err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO leases%'`).Scan(&n)
		return err == nil && n == 1
	})

	w := *a
	w.Version++
	w.Message = "written while the lease was waited for"
	rec, err := encode("actor", &w)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE actors SET record = $2, version = $3 WHERE key = $1`, a.Key().String(), rec, w.Version); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.actor == nil || r.actor.Version != w.Version || r.actor.Message != w.Message {
		t.Fatalf("the acquisition read %+v; want the write it waited for (version %d, %q)", r.actor, w.Version, w.Message)
	}
}
