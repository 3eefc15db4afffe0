package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/store"
)

// seedActor creates atespace default, template tpl and actor name on s.
func seedActor(t testing.TB, s store.Store, name string) *store.Actor {
	t.Helper()
	ctx := context.Background()
	if _, err := s.GetAtespace(ctx, "default"); errors.Is(err, store.ErrNotFound) {
		if err := s.CreateAtespace(ctx, &store.Atespace{Name: "default", UID: "ns"}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl", UID: "t",
			Spec: &atev1.ActorTemplateSpec{}}); err != nil {
			t.Fatal(err)
		}
	}
	a := &store.Actor{Atespace: "default", Name: name, UID: "uid-" + name, Template: "tpl",
		Lifecycle: store.Lifecycle{State: store.Suspended}}
	if err := s.CreateActor(ctx, a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestViewFollowsOtherStore: what a second Store (another replica) does
// to the workers reaches the first's view: an added worker, its claim,
// its release, a re-registration under another node, its deletion.
func TestViewFollowsOtherStore(t *testing.T) {
	ctx := context.Background()
	url := srv.NewDatabase(t)
	s1, s2 := openStore(t, url), openStore(t, url)
	viewSays := func(what string, cond func(e viewEntry, ok bool) bool) {
		t.Helper()
		waitFor(t, what, func() bool { return cond(s1.view.get("w0")) })
	}
	if err := s2.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n0", Labels: map[string]string{"pool": "a"}}); err != nil {
		t.Fatal(err)
	}
	viewSays("added w0 free on n0", func(e viewEntry, ok bool) bool { return ok && e.free && e.node == "n0" && e.labels["pool"] == "a" })
	a, _, err := s2.ClaimWorker(ctx, seedActor(t, s2, "a"), "")
	if err != nil {
		t.Fatal(err)
	}
	viewSays("w0 claimed", func(e viewEntry, ok bool) bool { return ok && !e.free })
	if err := s2.ReleaseWorker(ctx, "w0", a.UID); err != nil {
		t.Fatal(err)
	}
	viewSays("w0 freed", func(e viewEntry, ok bool) bool { return ok && e.free })
	if err := s2.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	viewSays("w0 moved to n1", func(e viewEntry, ok bool) bool { return ok && e.node == "n1" && e.labels == nil })
	if err := s2.DeleteWorker(ctx, "w0"); err != nil {
		t.Fatal(err)
	}
	viewSays("w0 deleted", func(_ viewEntry, ok bool) bool { return !ok })
	got, done := s1.view.candidates("", nil, 10, true)
	done()
	if len(got) != 0 {
		t.Fatalf("candidates after the delete: %v", got)
	}
}

// insertUnannounced inserts worker name on node as no Store does: by
// SQL, so no announcement is ever sent for it.
func insertUnannounced(t *testing.T, url, name, node string) {
	t.Helper()
	if _, err := connect(t, url).Exec(context.Background(),
		`INSERT INTO workers (name, node, tunnel_addr, sandbox_class) VALUES ($1, $2, '', '')`, name, node); err != nil {
		t.Fatal(err)
	}
}

// TestFallbackClaimsUnheardWorker: a worker the view has not heard of
// (inserted by SQL, so never announced) is still claimed, by the
// fallback query.
func TestFallbackClaimsUnheardWorker(t *testing.T) {
	ctx := context.Background()
	url := srv.NewDatabase(t)
	s := openStore(t, url)
	a := seedActor(t, s, "a")
	insertUnannounced(t, url, "ghost", "n")
	if _, ok := s.view.get("ghost"); ok {
		t.Fatal("the view heard of a worker inserted without announcement")
	}
	_, w, err := s.ClaimWorker(ctx, a, "n")
	if err != nil || w.Name != "ghost" || w.ActorUID != a.UID {
		t.Fatalf("claim = %+v, %v; want ghost", w, err)
	}
	if e, ok := s.view.get("ghost"); !ok || e.free {
		t.Fatalf("after its claim, the view has ghost as %+v, %v; want held", e, ok)
	}
}

// TestViewResyncBoundsLostAnnouncements: a change no one announced (its
// writer died between commit and announcement) reaches the view by the
// periodic reload, and a deletion no one announced leaves it too.
func TestViewResyncBoundsLostAnnouncements(t *testing.T) {
	url := srv.NewDatabase(t)
	s, err := Open(context.Background(), url, Options{Logger: testLogger(), ViewResync: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	insertUnannounced(t, url, "ghost", "n")
	waitFor(t, "the unannounced worker in the view", func() bool {
		e, ok := s.view.get("ghost")
		return ok && e.free && e.node == "n"
	})
	if _, err := connect(t, url).Exec(context.Background(), `DELETE FROM workers WHERE name = 'ghost'`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the unannounced deletion in the view", func() bool {
		_, ok := s.view.get("ghost")
		return !ok
	})
}

// txRecorder is a pgx tracer that records each statement a connection
// sends inside a transaction (between its BEGIN and COMMIT or ROLLBACK),
// whether sent alone or in a batch (the pipelined writes, pipeline.go).
type txRecorder struct {
	mu   sync.Mutex
	inTx map[*pgx.Conn]bool
	sent []string // statements sent inside transactions
}

func (r *txRecorder) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.saw(conn, d.SQL)
	return ctx
}

func (r *txRecorder) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range d.Batch.QueuedQueries {
		r.saw(conn, q.SQL)
	}
	return ctx
}

// saw records sql, sent on conn; r.mu is held.
func (r *txRecorder) saw(conn *pgx.Conn, sql string) {
	switch sql := strings.ToLower(strings.TrimSpace(sql)); {
	case strings.HasPrefix(sql, "begin"):
		r.inTx[conn] = true
	case sql == "commit" || sql == "rollback":
		delete(r.inTx, conn)
	case r.inTx[conn]:
		r.sent = append(r.sent, sql)
	}
}

func (r *txRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData)     {}
func (r *txRecorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *txRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestNoNotifyInsideWrites: no transaction that writes workers or
// actors issues a NOTIFY, neither by a statement of the Store nor by a
// trigger of the schema. A transaction that has issued NOTIFY commits
// under one lock on the whole database cluster, held through its WAL
// flush, so one inside each claim and release serialised them all
// (issue 33). Announcements go after the commit; and they still reach
// the other replica.
func TestNoNotifyInsideWrites(t *testing.T) {
	ctx := context.Background()
	url := srv.NewDatabase(t)
	rec := &txRecorder{inTx: map[*pgx.Conn]bool{}}
	s, err := Open(ctx, url, Options{Logger: testLogger(), tracer: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rec.mu.Lock()
	rec.sent = nil // the migrations' statements
	rec.mu.Unlock()
	other := openStore(t, url)

	// Every write path that changes a worker's row.
	if err := s.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n"}); err != nil {
		t.Fatal(err)
	}
	a, _, err := s.ClaimWorker(ctx, seedActor(t, s, "a"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseWorker(ctx, "w0", a.UID); err != nil {
		t.Fatal(err)
	}
	if a, _, err = s.ClaimWorker(ctx, a, ""); err != nil {
		t.Fatal(err)
	}
	n := *a
	n.State, n.Worker = store.Suspended, ""
	if a, err = s.UpdateActor(ctx, &n); err != nil {
		t.Fatal(err)
	}
	if a, _, err = s.ClaimWorker(ctx, a, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteActor(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the other replica hears w0 freed", func() bool {
		e, ok := other.view.get("w0")
		return ok && e.free
	})
	if err := s.DeleteWorker(ctx, "w0"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the other replica hears w0 deleted", func() bool {
		_, ok := other.view.get("w0")
		return !ok
	})

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.sent) == 0 {
		t.Fatal("the tracer saw no statement inside a transaction: it proves nothing")
	}
	for _, sql := range rec.sent {
		if strings.Contains(sql, "notify") {
			t.Errorf("a statement inside a write's transaction notifies:\n%s", sql)
		}
	}
	rows, err := connect(t, url).Query(ctx, `SELECT t.tgrelid::regclass::text || '.' || t.tgname
		FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
		WHERE NOT t.tgisinternal AND p.prosrc ILIKE '%notify%'`)
	if err != nil {
		t.Fatal(err)
	}
	triggers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(triggers) > 0 {
		t.Errorf("triggers that notify inside the writing transaction: %v", triggers)
	}
}

// TestStaleViewNeverMisclaims: a view that believes a taken worker free
// (another replica's claim not yet heard of) costs a skipped candidate,
// not a second binding; and the claim still finds the free worker it
// does not know.
func TestStaleViewNeverMisclaims(t *testing.T) {
	ctx := context.Background()
	url := srv.NewDatabase(t)
	s1, s2 := openStore(t, url), openStore(t, url)
	if err := s2.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n"}); err != nil {
		t.Fatal(err)
	}
	a, _, err := s2.ClaimWorker(ctx, seedActor(t, s2, "a"), "")
	if err != nil {
		t.Fatal(err)
	}
	// Make s1's view stale for good: w0 free at a revision no row has.
	s1.view.put("w0", viewEntry{node: "n", free: true, rev: 1 << 62})
	b := seedActor(t, s2, "b")
	if _, _, err := s1.ClaimWorker(ctx, b, "", "w0"); !errors.Is(err, store.ErrNoFreeWorker) {
		t.Fatalf("claim with only w0, taken, believed free: %v, want ErrNoFreeWorker", err)
	}
	if err := s2.PutWorker(ctx, &store.Worker{Name: "w1", Node: "n"}); err != nil {
		t.Fatal(err)
	}
	s1.view.remove("w1", 1<<62) // and blind to w1 for good
	_, w, err := s1.ClaimWorker(ctx, b, "")
	if err != nil || w.Name != "w1" {
		t.Fatalf("claim with w1 free but unknown to the view = %+v, %v; want w1", w, err)
	}
	if got, err := s1.GetWorker(ctx, "w0"); err != nil || got.ActorUID != a.UID {
		t.Fatalf("w0 = %+v, %v; want still a's", got, err)
	}
}

// TestViewCandidates: the free-worker index gives candidates in (node,
// name) order, on one node or any, matching the selector, at most limit,
// and follows every change of an entry: claimed, freed, moved to another
// node, deleted, and a whole reload.
func TestViewCandidates(t *testing.T) {
	v := newView()
	put := func(name, node string, free bool, rev int64, labels map[string]string) {
		v.put(name, viewEntry{node: node, free: free, rev: rev, labels: labels})
	}
	put("b1", "nb", true, 1, nil)
	put("a2", "na", true, 2, map[string]string{"gpu": "yes"})
	put("a1", "na", true, 3, nil)
	put("c1", "nc", false, 4, nil)
	check := func(what, node string, sel map[string]string, limit int, want ...string) {
		t.Helper()
		got, done := v.candidates(node, sel, limit, true)
		done()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: candidates(%q, %v, %d) = %v, want %v", what, node, sel, limit, got, want)
		}
	}
	check("all", "", nil, 10, "a1", "a2", "b1")
	check("limit", "", nil, 2, "a1", "a2")
	check("one node", "na", nil, 10, "a1", "a2")
	check("node without free workers", "nc", nil, 10)
	check("node unknown", "nz", nil, 10)
	check("selector", "", map[string]string{"gpu": "yes"}, 10, "a2")
	put("a1", "na", false, 5, nil) // claimed
	check("after a claim", "", nil, 10, "a2", "b1")
	put("a1", "na", true, 4, nil) // an older read: ignored
	check("after an older read", "", nil, 10, "a2", "b1")
	put("c1", "nc", true, 6, nil) // freed
	put("b1", "nd", true, 7, nil) // moved
	check("after a release and a move", "", nil, 10, "a2", "c1", "b1")
	check("moved worker's old node", "nb", nil, 10)
	v.remove("a2", 8)
	check("after a delete", "", nil, 10, "c1", "b1")

	// Claims under way: each one's first candidate goes last for the
	// next, until it ends.
	first, done1 := v.candidates("", nil, 2, true)
	second, done2 := v.candidates("", nil, 2, true)
	third, done3 := v.candidates("", nil, 10, true)
	if strings.Join(first, ",") != "c1,b1" || strings.Join(second, ",") != "b1,c1" || strings.Join(third, ",") != "c1,b1" {
		t.Errorf("candidates of three claims at once: %v, %v, %v; want [c1 b1], [b1 c1], [c1 b1] (all under way: in order)", first, second, third)
	}
	done2()
	done3()
	// A claim that marks none (it prefers a standby) leaves b1 unmarked.
	if got, _ := v.candidates("", nil, 10, false); strings.Join(got, ",") != "b1,c1" {
		t.Errorf("candidates of a claim that marks none: %v, want [b1 c1]", got)
	}
	check("with the first claim still under way", "", nil, 10, "b1", "c1")
	done1()
	check("after every claim ended", "", nil, 10, "c1", "b1")
	if len(v.claiming) != 0 {
		t.Errorf("claims under way after every one ended: %v", v.claiming)
	}

	v.replace(map[string]viewEntry{"z9": {node: "na", free: true, rev: 9}, "y1": {node: "na", rev: 10}})
	check("after a reload", "", nil, 10, "z9")
}

// TestConcurrentClaimsEachTakeTheirOwn: claims at once on one Store bind
// each the first worker the view offered it, without falling back to the
// query over the table: each passes over the workers the others under
// way are binding (view.candidates). Before, they all tried the same
// first few, and at 1024 clients the claims that found those taken fell
// back to a query of 9–11 ms (issue 33).
func TestConcurrentClaimsEachTakeTheirOwn(t *testing.T) {
	ctx := context.Background()
	trips := &tripCounter{}
	s := openCounted(t, trips)
	const claims = 48
	for i := range claims + 16 {
		if err := s.PutWorker(ctx, &store.Worker{Name: fmt.Sprintf("w%03d", i), Node: "n"}); err != nil {
			t.Fatal(err)
		}
	}
	actors := make([]*store.Actor, claims)
	for i := range actors {
		actors[i] = seedActor(t, s, fmt.Sprintf("a%02d", i))
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	sent := trips.during(func() {
		for _, a := range actors {
			wg.Go(func() {
				<-start
				if _, _, err := s.ClaimWorker(ctx, a, "n"); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
	})
	fallbacks := 0
	for _, sql := range sent {
		if strings.Contains(sql, "FROM workers WHERE actor_uid IS NULL") {
			fallbacks++
		}
	}
	if fallbacks > 0 {
		t.Errorf("%d of %d claims at once fell back to the query over the table", fallbacks, claims)
	}
	if len(sent) != 2*claims {
		t.Errorf("%d round trips for %d claims, want two each", len(sent), claims)
	}
}

// TestClaimLocksOneCandidate: a claim's bind locks the one worker it
// binds, with the table's statistics missing (workers just registered)
// and with them: not its other candidates, which concurrent claims would
// then pass over, and never a worker that is not free.
func TestClaimLocksOneCandidate(t *testing.T) {
	ctx := context.Background()
	url := srv.NewDatabase(t)
	s := openStore(t, url)
	for i := range 64 {
		if err := s.PutWorker(ctx, &store.Worker{Name: fmt.Sprintf("w%02d", i), Node: "n"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, w, err := s.ClaimWorker(ctx, seedActor(t, s, "holder"), "n"); err != nil || w.Name != "w00" {
		t.Fatalf("holder's claim: %v, %v; want w00", w, err)
	}
	a := seedActor(t, s, "a")
	var candidates []string
	for i := range 16 {
		candidates = append(candidates, fmt.Sprintf("w%02d", i))
	}
	claimer, other := connect(t, url), connect(t, url)
	// Without statistics and with them; each with the plan PostgreSQL
	// makes for these arguments and with the generic plan it switches a
	// prepared statement to after five runs.
	for i, analysed := range []bool{false, false, true, true} {
		generic := i%2 == 1
		if _, err := claimer.Exec(ctx, `SET plan_cache_mode = `+map[bool]string{false: "force_custom_plan", true: "force_generic_plan"}[generic]); err != nil {
			t.Fatal(err)
		}
		if analysed && !generic {
			if _, err := claimer.Exec(ctx, `ANALYZE workers`); err != nil {
				t.Fatal(err)
			}
		}
		tx, err := claimer.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bf := newBinder(a, "n", nil)
		b := &pgx.Batch{}
		bf.queueCandidates(b, candidates)
		br := tx.SendBatch(ctx, b)
		w, _, err := bf.result(br.QueryRow())
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil || w == nil || w.Name != "w01" {
			t.Fatalf("analysed %v, generic plan %v: bound %v, %v; want w01, the first free candidate", analysed, generic, w, err)
		}
		rows, err := other.Query(ctx, `SELECT name FROM workers WHERE name = ANY($1) ORDER BY name FOR UPDATE SKIP LOCKED`, candidates)
		if err != nil {
			t.Fatal(err)
		}
		lockable, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Concat(candidates[:1], candidates[2:])
		if !slices.Equal(lockable, want) {
			t.Errorf("analysed %v, generic plan %v: the candidates other claims can lock during the bind: %v; want all but w01", analysed, generic, lockable)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
