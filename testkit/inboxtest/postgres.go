package inboxtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/inbox"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
	"example.com/shop/testkit"
)

// pgDB is what the PostgreSQL Store's statements need of an inbox.DB: a pool.
type pgDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Postgres is the Store of inbox.PostgresStore, on databases of the test server
// migrated with schema (which must hold inbox.Migrations).
func Postgres(schema migrate.Schema) Store[inbox.DB, pgx.Tx] {
	return Store[inbox.DB, pgx.Tx]{
		Store: inbox.PostgresStore{},
		NewDatabase: func(t testing.TB) (inbox.DB, string) {
			pool, url := testkit.NewDatabase(t, schema)
			return pool, url
		},
		Open: func(ctx context.Context, dsn string) (inbox.DB, func(), error) {
			pool, err := pg.NewPool(ctx, dsn)
			if err != nil {
				return nil, nil, err
			}
			return pool, pool.Close, nil
		},
		Exec: func(ctx context.Context, db inbox.DB, query string, args ...any) error {
			_, err := db.(pgDB).Exec(ctx, placeholders(query), args...)
			return err
		},
		Count: func(ctx context.Context, db inbox.DB, query string, args ...any) (int, error) {
			var n int
			err := db.(pgDB).QueryRow(ctx, placeholders(query), args...).Scan(&n)
			return n, err
		},
		ExecTx: func(ctx context.Context, tx pgx.Tx, query string, args ...any) error {
			_, err := tx.Exec(ctx, placeholders(query), args...)
			return err
		},
		Begin:    func(ctx context.Context, db inbox.DB) (pgx.Tx, error) { return db.Begin(ctx) },
		Commit:   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
		Rollback: func(ctx context.Context, tx pgx.Tx) { _ = tx.Rollback(ctx) },
		LockWaits: func(ctx context.Context, db inbox.DB) (int, error) {
			var n int
			err := db.(pgDB).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO processed_event%'`).Scan(&n)
			return n, err
		},
		SeedKeys: func(ctx context.Context, db inbox.DB, consumer string, n int, age time.Duration) error {
			_, err := db.(pgDB).Exec(ctx, `INSERT INTO processed_event (consumer, message_key, processed_at)
SELECT $1, gen_random_uuid()::text, now() - $3::interval FROM generate_series(1, $2)`, consumer, n, age)
			return err
		},
		Purge: func(ctx context.Context, db inbox.DB, consumer string, olderThan time.Duration) (int64, error) {
			pool, ok := db.(*pgxpool.Pool)
			if !ok {
				return 0, fmt.Errorf("purge needs a *pgxpool.Pool, got %T", db)
			}
			return inbox.Purge(ctx, pool, consumer, olderThan)
		},
	}
}
