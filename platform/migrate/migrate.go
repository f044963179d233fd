// Package migrate applies a service's embedded goose SQL migrations to its
// PostgreSQL database.
package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"example.com/shop/platform/pg"
)

// Result names one migration that Up applied, for the caller's log.
type Result struct {
	Version int64
	Source  string
}

// Up creates the database named in databaseURL when it is missing
// (pg.EnsureDatabase), then applies every pending goose migration found at
// the root of migrations (files named NNNNN_name.sql).
//
// Concurrent runs against one database are safe: each holds a PostgreSQL
// session-level advisory lock while it migrates, and the others wait (polling
// once a second, for at most 5 minutes), then find nothing left to apply.
// Running Up again is a no-op. It returns the migrations it applied, or an
// error naming the failing migration; a failed migration's own transaction is
// rolled back by goose.
func Up(ctx context.Context, databaseURL string, migrations fs.FS) ([]Result, error) {
	if err := pg.EnsureDatabase(ctx, databaseURL); err != nil {
		return nil, err
	}
	connCfg, err := pg.ConnConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*connCfg)
	defer db.Close()

	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	applied, err := provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate database %q: %w", connCfg.Database, err)
	}
	return results(applied), nil
}

// Apply runs Up and logs what it did to logger as the JSON records of the process:
// "migration applied" at INFO for each migration (version, source), then "database
// is up to date" (database, its name; applied, how many migrations this run applied).
// It returns Up's error, unlogged: the caller reports it once.
func Apply(ctx context.Context, databaseURL string, migrations fs.FS, logger *slog.Logger) error {
	applied, err := Up(ctx, databaseURL, migrations)
	if err != nil {
		return err
	}
	for _, m := range applied {
		logger.InfoContext(ctx, "migration applied", slog.Int64("version", m.Version), slog.String("source", m.Source))
	}
	var name string
	if cfg, err := pg.ConnConfig(databaseURL); err == nil {
		name = cfg.Database
	}
	logger.InfoContext(ctx, "database is up to date", slog.String("database", name), slog.Int("applied", len(applied)))
	return nil
}

func results(applied []*goose.MigrationResult) []Result {
	out := make([]Result, 0, len(applied))
	for _, r := range applied {
		out = append(out, Result{Version: r.Source.Version, Source: r.Source.Path})
	}
	return out
}
