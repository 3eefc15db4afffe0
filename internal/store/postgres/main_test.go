package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"

	"go.uber.org/goleak"

	"substrate.dev/ate/internal/store/postgres/pgtest"
)

// srv is the one PostgreSQL server of this test binary (initdb and start
// take a second or two); every test gets its own database on it.
var srv *pgtest.Server

func TestMain(m *testing.M) {
	var err error
	if srv, err = pgtest.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := srv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	// Every Store's pool and listener, and pgtest's process watchers,
	// must have ended by now.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testLogger shows warnings and errors (a listener losing its
// connection) on stderr; it must not be t.Log, which panics when a
// goroutine logs after its test.
func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// openStore opens a Store on url, closed when t ends (before its
// database is dropped, cleanups being last-in first-out).
func openStore(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, Options{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
