package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/postgres/pgtest"
	"substrate.dev/ate/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openStore(t, srv.NewDatabase(t)) })
}

// connect opens a plain connection to url, closed when t ends.
func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// schemaVersion is the highest migration goose recorded in url's database.
func schemaVersion(t testing.TB, conn *pgx.Conn) int64 {
	t.Helper()
	var v int64
	if err := conn.QueryRow(context.Background(), `SELECT max(version_id) FROM goose_db_version WHERE is_applied`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// newest is the version of the newest embedded migration.
func newest(t testing.TB) int64 {
	t.Helper()
	files, err := migrationFiles()
	if err != nil {
		t.Fatal(err)
	}
	return files[len(files)-1]
}

// TestConcurrentMigrations: two Opens on one fresh database at once both
// succeed (the advisory lock serialises them), and the schema is at the
// newest version.
func TestConcurrentMigrations(t *testing.T) {
	url := srv.NewDatabase(t)
	var wg sync.WaitGroup
	stores := make([]*Store, 2)
	errs := make([]error, 2)
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = Open(context.Background(), url, Options{Logger: testLogger()}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		t.Cleanup(func() { _ = stores[i].Close() })
	}
	if v := schemaVersion(t, connect(t, url)); v != newest(t) {
		t.Fatalf("schema version %d, want %d", v, newest(t))
	}
	// Both work on it.
	ctx := context.Background()
	if err := stores[0].CreateAtespace(ctx, &store.Atespace{Name: "default"}); err != nil {
		t.Fatal(err)
	}
	if _, err := stores[1].GetAtespace(ctx, "default"); err != nil {
		t.Fatal(err)
	}
}

// TestFailingMigration: a migration that fails halfway is rolled back
// whole: the error names its file, the schema stays at the version
// before, and the table its first statement created does not exist.
func TestFailingMigration(t *testing.T) {
	url := srv.NewDatabase(t)
	initial, err := embedded.ReadFile("migrations/00001_initial.sql")
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{
		"00001_initial.sql": {Data: initial},
		"00002_broken.sql": {Data: []byte("-- +goose Up\nCREATE TABLE broken_half (id int);\n" +
			"INSERT INTO broken_half VALUES (1);\nSELECT no_such_function();\n")},
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	err = migrate(context.Background(), cfg, fsys, testLogger())
	if err == nil || !strings.Contains(err.Error(), "00002_broken.sql") || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("migrate with a broken second file = %v, want an error naming 00002_broken.sql and version 1", err)
	}
	t.Log(err)
	conn := connect(t, url)
	if v := schemaVersion(t, conn); v != 1 {
		t.Fatalf("schema version %d after the failure, want 1", v)
	}
	var half *string
	if err := conn.QueryRow(context.Background(), `SELECT to_regclass('broken_half')::text`).Scan(&half); err != nil || half != nil {
		t.Fatalf("broken_half exists after the failed migration (%v, %v)", half, err)
	}
	// The good migration stands: its tables are there.
	var actors *string
	if err := conn.QueryRow(context.Background(), `SELECT to_regclass('actors')::text`).Scan(&actors); err != nil || actors == nil {
		t.Fatalf("actors table missing after 00001 (%v)", err)
	}
}

// TestSchemaTooNew: a database a newer ate migrated is refused, saying
// what to do.
func TestSchemaTooNew(t *testing.T) {
	url := srv.NewDatabase(t)
	s := openStore(t, url)
	_ = s.Close()
	// One past the newest migration this ate has (a constant would stop
	// being newer once that many migrations exist).
	next := newest(t) + 1
	if _, err := connect(t, url).Exec(context.Background(),
		`INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, next); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), url, Options{})
	want := fmt.Sprintf("database schema version %d is newer than this ate knows (%d): upgrade ate before pointing it at this database", next, newest(t))
	if !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open of a newer schema = %v, want ErrSchemaTooNew saying %q", err, want)
	}
}

// TestOpenUnreachable: Open against a port nothing listens on fails at
// once with ErrUnavailable naming host:port; against one that never
// answers, when ctx ends.
func TestOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	// Listening but never accepting answers nothing: the handshake hangs.
	t.Cleanup(func() { l.Close() })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	for _, tc := range []struct {
		name, addr string
		timeout    time.Duration
	}{
		{"refused", closedAddr, 10 * time.Second},
		{"silent", addr, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			start := time.Now()
			_, err := Open(ctx, "postgres://postgres@"+tc.addr+"/x?sslmode=disable", Options{})
			took := time.Since(start)
			if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), tc.addr) {
				t.Fatalf("Open = %v, want ErrUnavailable naming %s", err, tc.addr)
			}
			if took > tc.timeout+2*time.Second {
				t.Fatalf("Open took %s, ctx allowed %s", took, tc.timeout)
			}
			t.Logf("%s after %s", err, took.Round(time.Millisecond))
		})
	}
	if _, err := Open(context.Background(), "mysql://x", Options{}); err == nil || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Open of a non-postgres URL = %v", err)
	}
}

// TestServerRestartAndLoss: across a server restart the store recovers
// by itself (calls may fail with ErrUnavailable meanwhile, never with
// anything else), Ping dials its connection again, and its view's
// listener reconnects and reloads; once the server is gone, every call
// fails with ErrUnavailable, Ping's too.
func TestServerRestartAndLoss(t *testing.T) {
	ctx := context.Background()
	private, err := pgtest.StartLocal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = private.Stop() })
	url := private.NewDatabase(t)
	s := openStore(t, url)
	if err := s.CreateAtespace(ctx, &store.Atespace{Name: "default"}); err != nil {
		t.Fatal(err)
	}
	// Ping's own connection is open from here, and the restart cuts it.
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}

	if err := private.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Ping answers after a restart", func() bool {
		err := s.Ping(ctx)
		if err != nil && !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Ping across a restart: %v, want nil or ErrUnavailable", err)
		}
		return err == nil
	})
	waitFor(t, "the store answers after a restart", func() bool {
		_, err := s.GetAtespace(ctx, "default")
		if err != nil && !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("GetAtespace across a restart: %v, want nil or ErrUnavailable", err)
		}
		return err == nil
	})
	// A change made after the restart reaches the view: the listener is
	// back (a second store writes it, so only the listener can tell).
	other := openStore(t, url)
	if err := other.PutWorker(ctx, &store.Worker{Name: "w-after", Node: "n"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the view hears of a worker added after the restart", func() bool {
		_, ok := s.view.get("w-after")
		return ok
	})

	if err := private.Stop(); err != nil {
		t.Fatal(err)
	}
	a := &store.Actor{Atespace: "default", Name: "a", UID: "u"}
	for name, call := range map[string]func() error{
		"Ping":         func() error { return s.Ping(ctx) },
		"GetAtespace":  func() error { _, err := s.GetAtespace(ctx, "default"); return err },
		"ListActors":   func() error { _, _, err := s.ListActors(ctx, "", 10, ""); return err },
		"UpdateActor":  func() error { _, err := s.UpdateActor(ctx, a); return err },
		"ClaimWorker":  func() error { _, _, err := s.ClaimWorker(ctx, a, ""); return err },
		"PutWorker":    func() error { return s.PutWorker(ctx, &store.Worker{Name: "w"}) },
		"AcquireLease": func() error { _, err := s.AcquireLease(ctx, "k", "h", time.Second); return err },
		"RecordActivity": func() error {
			return s.RecordActivity(ctx, []names.Activity{{Actor: a.Key(), Last: time.Now()}})
		},
	} {
		if err := call(); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), private.Addr()) {
			t.Errorf("%s with the server gone = %v, want ErrUnavailable naming %s", name, err, private.Addr())
		}
	}
}

// waitFor polls cond until it holds, failing t after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond) // pacing the poll, not synchronising
	}
}

// TestClaimAcrossReplicas: two Stores (two API servers) on one database
// resume 40 actors against 8 workers at once: every worker is bound
// once, and the records agree both ways.
func TestClaimAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	url := srv.NewDatabase(t)
	replicas := []*Store{openStore(t, url), openStore(t, url)}
	for i := range 8 {
		if err := replicas[i%2].PutWorker(ctx, &store.Worker{Name: fmt.Sprintf("w%d", i), Node: "n"}); err != nil {
			t.Fatal(err)
		}
	}
	actors := make([]*store.Actor, 40)
	for i := range actors {
		actors[i] = seedActor(t, replicas[0], fmt.Sprintf("a%02d", i))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(actors))
	start := make(chan struct{})
	for i, a := range actors {
		wg.Go(func() {
			<-start
			_, _, errs[i] = replicas[i%2].ClaimWorker(ctx, a, "")
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrNoFreeWorker):
			t.Errorf("claim for %s: %v", actors[i].Name, err)
		}
	}
	if won != 8 {
		t.Fatalf("%d claims won, want 8", won)
	}
	workers, err := replicas[1].ListWorkers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		a, err := replicas[1].GetActor(ctx, w.Actor)
		if err != nil || a.Worker != w.Name || a.UID != w.ActorUID || a.State != store.Resuming {
			t.Errorf("worker %s held by %s, whose record is %+v (%v)", w.Name, w.Actor, a, err)
		}
	}
}

// TestOpenTLSRequiredIsAConfigurationError: sslmode=require against a
// server without TLS is refused at once, not retried as an outage.
func TestOpenTLSRequiredIsAConfigurationError(t *testing.T) {
	url := strings.Replace(srv.NewDatabase(t), "sslmode=disable", "sslmode=require", 1)
	_, err := Open(t.Context(), url, Options{})
	if err == nil || errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "does not offer TLS") {
		t.Fatalf("Open with sslmode=require on a server without TLS = %v; want a configuration error, not ErrUnavailable", err)
	}
}
