package identity

import (
	"context"
	"fmt"
	"os"
	"testing"

	"substrate.dev/ate/internal/store/postgres/pgtest"
)

// pg is the one PostgreSQL server of this test binary; each test that
// uses it gets its own database.
var pg *pgtest.Server

func TestMain(m *testing.M) {
	var err error
	if pg, err = pgtest.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := pg.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}
