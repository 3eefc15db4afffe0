package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// ErrSchemaTooNew: the database was migrated by a newer ate than this
// one, whose queries may not fit its schema. Open refuses it.
var ErrSchemaTooNew = errors.New("upgrade ate before pointing it at this database")

//go:embed migrations/*.sql
var embedded embed.FS

// migrations are the schema's versioned migrations, NNNNN_what.sql, in
// goose's format: forward-only (no Down sections), each applied in one
// transaction.
func migrations() fs.FS {
	sub, err := fs.Sub(embedded, "migrations")
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	return sub
}

// migrationFiles returns the versions of the embedded migrations, in
// order.
func migrationFiles() ([]int64, error) {
	files, err := fs.Glob(migrations(), "*.sql")
	if err != nil {
		return nil, err
	}
	var versions []int64
	for _, f := range files { // fs.Glob sorts, and the names are zero-padded
		v, err := goose.NumericComponent(f)
		if err != nil {
			return nil, err
		}
		versions = append(versions, v)
	}
	return versions, nil
}

// migrationLockTimeout bounds how long Open waits for another replica's
// migration to finish (goose polls its advisory lock once a second, its
// shortest period, so that is also how long a second replica starting
// at the same moment waits at least).
const migrationLockTimeout = 5 * time.Minute

// migrate brings the database of cfg to the newest migration in fsys,
// under a session advisory lock (goose's lock ID), so replicas starting
// at once migrate one after the other and the later finds nothing to do.
// It refuses, with ErrSchemaTooNew, a database whose version is higher
// than fsys's newest, before migrating and after (a newer replica may
// have migrated in between). A failing migration's transaction is
// rolled back: the error names its file, and the schema stays at the
// version before it. It uses a connection of its own, closed at return,
// so the lock cannot outlive it.
func migrate(ctx context.Context, cfg *pgx.ConnConfig, fsys fs.FS, log *slog.Logger) error {
	db := stdlib.OpenDB(*cfg.Copy())
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, uint64(migrationLockTimeout/time.Second)))
	if err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true), // no package state: only fsys's files
		goose.WithSlog(log),
	)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	sources := p.ListSources()
	known := sources[len(sources)-1].Version // NewProvider fails on none
	tooNew := func() error {
		v, err := p.GetDBVersion(ctx)
		if err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		if v > known {
			return fmt.Errorf("database schema version %d is newer than this ate knows (%d): %w", v, known, ErrSchemaTooNew)
		}
		return nil
	}
	if err := tooNew(); err != nil {
		return err
	}
	// goose logs each migration it applies to log.
	if _, err := p.Up(ctx); err != nil {
		var partial *goose.PartialError
		if errors.As(err, &partial) {
			return fmt.Errorf("migration %s failed, schema left at version %d: %w",
				partial.Failed.Source.Path, lastVersion(ctx, p, partial.Applied), partial.Err)
		}
		return fmt.Errorf("migrate: %w", err)
	}
	return tooNew()
}

// lastVersion is the schema version after a partial migration: the last
// applied in this run, else what the database records.
func lastVersion(ctx context.Context, p *goose.Provider, applied []*goose.MigrationResult) int64 {
	if len(applied) > 0 {
		return applied[len(applied)-1].Source.Version
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return -1
	}
	return v
}

// SchemaVersion is the version of the newest embedded migration: the
// schema version Open leaves a database at.
func SchemaVersion() int64 {
	versions, err := migrationFiles()
	if err != nil || len(versions) == 0 {
		panic(fmt.Sprintf("embedded migrations: %v", err)) // embedded at build time
	}
	return versions[len(versions)-1]
}
