// Package migrate applies a database's embedded goose SQL migrations: the sets
// of the platform's tables a service uses (the inbox, dead letters, the outbox),
// then the service's own (docs/architecture.md, "The platform's tables").
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"example.com/shop/platform/pg"
)

// Set is one series of goose migrations (files named NNNNN_name.sql at the root
// of FS) with its own version table, so that the versions of one set never
// collide with another's.
type Set struct {
	// Name names the set in logs and errors: a platform part ("inbox") or the
	// service ("stock").
	Name string
	// FS holds the migrations.
	FS fs.FS
	// Table is goose's version table of the set; "" is goose's default,
	// goose_db_version, which a service's own set keeps.
	Table string
	// Roles, for a platform part, names the service's role for each of the
	// part's placeholders: a migration's {{.app}} becomes Roles["app"]. Each must
	// be a lower-case SQL identifier; a missing one fails the migration. Up
	// creates a role that does not exist yet as NOLOGIN, so no grant is skipped
	// (deploy/postgres/roles.sql gives it LOGIN, before or after).
	Roles map[string]string
	// From, when above 0, is the version this set had reached in the last
	// release whose migrations created, in this set, the tables the schema's
	// other sets now own. A database that has this set applied but none of the
	// other sets (it predates them) must have reached From, or Up refuses it:
	// it must first be migrated by that release.
	From int64
}

// Schema is every set of one database, in the order Up applies them: the
// platform parts first (a service's migrations may use their tables), the
// service's own last.
type Schema []Set

// Result names one migration that Up applied, for the caller's log.
type Result struct {
	Set     string
	Version int64
	Source  string
}

// Up creates the database named in databaseURL when it is missing
// (pg.EnsureDatabase), then applies every pending migration of each set of
// schema, set after set.
//
// Concurrent runs against one database are safe: each holds a PostgreSQL
// session-level advisory lock while it migrates a set, and the others wait
// (polling once a second, for at most 5 minutes), then find nothing left to
// apply. Running Up again is a no-op. It returns the migrations it applied, or
// an error naming the failing set and migration; a failed migration's own
// transaction is rolled back by goose, and later sets are not started.
func Up(ctx context.Context, databaseURL string, schema Schema) ([]Result, error) {
	if err := pg.EnsureDatabase(ctx, databaseURL); err != nil {
		return nil, err
	}
	connCfg, err := pg.ConnConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*connCfg)
	defer db.Close()

	for _, set := range schema {
		if err := checkFrom(ctx, db, schema, set); err != nil {
			return nil, fmt.Errorf("migrate database %q: %w", connCfg.Database, err)
		}
	}
	var out []Result
	for _, set := range schema {
		applied, err := up(ctx, db, set)
		out = append(out, applied...)
		if err != nil {
			return out, fmt.Errorf("migrate database %q, set %s: %w", connCfg.Database, set.Name, err)
		}
	}
	return out, nil
}

func up(ctx context.Context, db *sql.DB, set Set) ([]Result, error) {
	if err := ensureRoles(ctx, db, set.Roles); err != nil {
		return nil, err
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, set.Files(),
		goose.WithSessionLocker(locker), goose.WithTableName(set.table()))
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	applied, err := provider.Up(ctx) // not provider.Close: it would close db
	if err != nil {
		return nil, err
	}
	out := make([]Result, 0, len(applied))
	for _, r := range applied {
		out = append(out, Result{Set: set.Name, Version: r.Source.Version, Source: r.Source.Path})
	}
	return out, nil
}

// checkFrom refuses a database that has set applied below set.From and none of
// the schema's other sets.
func checkFrom(ctx context.Context, db *sql.DB, schema Schema, set Set) error {
	if set.From <= 0 {
		return nil
	}
	for _, other := range schema {
		if other.Table == set.Table {
			continue
		}
		if exists, err := tableExists(ctx, db, other.table()); err != nil || exists {
			return err
		}
	}
	if exists, err := tableExists(ctx, db, set.table()); err != nil || !exists {
		return err
	}
	var version int64
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(version_id), 0) FROM `+set.table()+` WHERE is_applied`).Scan(&version); err != nil {
		return fmt.Errorf("read %s: %w", set.table(), err)
	}
	if version > 0 && version < set.From {
		return fmt.Errorf("set %s is at version %d, older than %d: migrate it first with the release that took it to %d",
			set.Name, version, set.From, set.From)
	}
	return nil
}

func tableExists(ctx context.Context, db *sql.DB, table string) (bool, error) {
	var exists bool
	err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists)
	return exists, err
}

// table is the set's goose version table.
func (s Set) table() string {
	if s.Table == "" {
		return goose.DefaultTablename
	}
	return s.Table
}

// ensureRoles creates each role of roles that does not exist yet, as NOLOGIN.
func ensureRoles(ctx context.Context, db *sql.DB, roles map[string]string) error {
	for _, role := range roles {
		if !identifier(role) {
			return fmt.Errorf("role %q is not a lower-case SQL identifier", role)
		}
		var exists bool
		if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil {
			return fmt.Errorf("look up role %s: %w", role, err)
		}
		if exists {
			continue
		}
		_, err := db.ExecContext(ctx, `CREATE ROLE `+role+` NOLOGIN`)
		var pgErr *pgconn.PgError
		if err != nil && !(errors.As(err, &pgErr) && (pgErr.Code == "42710" || pgErr.Code == "23505")) { // created meanwhile
			return fmt.Errorf("create role %s: %w", role, err)
		}
	}
	return nil
}

// identifier reports whether s is a lower-case SQL identifier that needs no quoting.
func identifier(s string) bool {
	if s == "" || len(s) > 63 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Apply runs Up and logs what it did to logger as the JSON records of the process:
// "migration applied" at INFO for each migration (set, version, source), then
// "database is up to date" (database, its name; applied, how many migrations this
// run applied). It returns Up's error, unlogged: the caller reports it once.
func Apply(ctx context.Context, databaseURL string, schema Schema, logger *slog.Logger) error {
	applied, err := Up(ctx, databaseURL, schema)
	for _, m := range applied {
		logger.InfoContext(ctx, "migration applied", slog.String("set", m.Set), slog.Int64("version", m.Version), slog.String("source", m.Source))
	}
	if err != nil {
		return err
	}
	var name string
	if cfg, err := pg.ConnConfig(databaseURL); err == nil {
		name = cfg.Database
	}
	logger.InfoContext(ctx, "database is up to date", slog.String("database", name), slog.Int("applied", len(applied)))
	return nil
}

// OnStart is Apply for a serve started with MIGRATE_ON_START: retried while the
// server of databaseURL does not answer (pg.Retry), so that a process started with
// its database applies its schema once the database is up. It returns ctx's error
// when ctx ends first, and Apply's error for one that no retry fixes.
func OnStart(ctx context.Context, databaseURL string, schema Schema, logger *slog.Logger) error {
	return pg.Retry(ctx, databaseURL, logger, func(ctx context.Context) error {
		return Apply(ctx, databaseURL, schema, logger)
	})
}
