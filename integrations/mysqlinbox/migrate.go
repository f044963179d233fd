package mysqlinbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the goose migrations that create processed_event on MySQL
// or MariaDB, for a service that runs them with its own.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded directory is part of the build
	}
	return sub
}

// VersionTable is the goose version table of Migrate, apart from an
// application's own goose_db_version.
const VersionTable = "processed_event_goose_version"

// Migrate applies Migrations to db with goose, recording them in VersionTable.
// Concurrent calls (several instances starting) serialise on a named server lock
// (GET_LOCK), held on a connection of its own while goose runs. It returns the
// first failing migration's error; applied ones stay.
func Migrate(ctx context.Context, db *sql.DB) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate processed_event: %w", err)
	}
	defer conn.Close()
	// The lock is per server: the database name keeps databases apart.
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(CONCAT('processed_event_migrate.', DATABASE()), 60)`).Scan(&got); err != nil {
		return fmt.Errorf("migrate processed_event: lock: %w", err)
	}
	if got.Int64 != 1 {
		return errors.New("migrate processed_event: another migration held the lock for 60s")
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `DO RELEASE_LOCK(CONCAT('processed_event_migrate.', DATABASE()))`)
	}()
	p, err := goose.NewProvider(goose.DialectMySQL, db, Migrations(),
		goose.WithTableName(VersionTable), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrate processed_event: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate processed_event: %w", err)
	}
	return nil
}
