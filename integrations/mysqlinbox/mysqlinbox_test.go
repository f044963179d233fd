package mysqlinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/integrations/mysqlinbox"
	"example.com/shop/testkit/inboxtest"
)

// newDatabase returns a migrated database of its own on the MySQL/MariaDB test
// server (TEST_MYSQL_DSN), dropped when t ends.
func newDatabase(t testing.TB) (*sql.DB, string) {
	t.Helper()
	db, dsn := newMySQLDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := mysqlinbox.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db, dsn
}

// mysqlStore is the store suite's description of MySQL and MariaDB.
func mysqlStore() inboxtest.Store[mysqlinbox.DB, *sql.Tx] {
	sqlDB := func(db mysqlinbox.DB) *sql.DB { return db.(*sql.DB) }
	return inboxtest.Store[mysqlinbox.DB, *sql.Tx]{
		Store: mysqlinbox.Store{},
		NewDatabase: func(t testing.TB) (mysqlinbox.DB, string) {
			return newDatabase(t)
		},
		Open: func(ctx context.Context, dsn string) (mysqlinbox.DB, func(), error) {
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				return nil, nil, err
			}
			return db, func() { db.Close() }, nil
		},
		Exec: func(ctx context.Context, db mysqlinbox.DB, query string, args ...any) error {
			_, err := db.ExecContext(ctx, query, args...)
			return err
		},
		Count: func(ctx context.Context, db mysqlinbox.DB, query string, args ...any) (int, error) {
			var n int
			err := sqlDB(db).QueryRowContext(ctx, query, args...).Scan(&n)
			return n, err
		},
		ExecTx: func(ctx context.Context, tx *sql.Tx, query string, args ...any) error {
			_, err := tx.ExecContext(ctx, query, args...)
			return err
		},
		Begin: func(ctx context.Context, db mysqlinbox.DB) (*sql.Tx, error) {
			return sqlDB(db).BeginTx(ctx, nil) // the server's default level, REPEATABLE READ
		},
		Commit:   func(ctx context.Context, tx *sql.Tx) error { return tx.Commit() },
		Rollback: func(ctx context.Context, tx *sql.Tx) { _ = tx.Rollback() },
		// The processlist, not information_schema.innodb_trx: MariaDB does not always
		// list a transaction in innodb_trx while its first row lock waits.
		LockWaits: func(ctx context.Context, db mysqlinbox.DB) (int, error) {
			var n int
			err := sqlDB(db).QueryRowContext(ctx, `SELECT count(*) FROM information_schema.processlist
WHERE db = DATABASE() AND command IN ('Query', 'Execute') AND info LIKE 'INSERT INTO processed_event%'`).Scan(&n)
			return n, err
		},
		SeedKeys: func(ctx context.Context, db mysqlinbox.DB, consumer string, n int, age time.Duration) error {
			for n > 0 {
				batch := min(n, 1000)
				var rows []string
				var args []any
				for range batch {
					rows = append(rows, "(?, ?, UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)")
					args = append(args, consumer, uuid.NewString(), age.Microseconds())
				}
				if _, err := db.ExecContext(ctx, `INSERT INTO processed_event (consumer, message_key, processed_at) VALUES `+
					strings.Join(rows, ", "), args...); err != nil {
					return fmt.Errorf("seed %d keys: %w", batch, err)
				}
				n -= batch
			}
			return nil
		},
		Purge: func(ctx context.Context, db mysqlinbox.DB, consumer string, olderThan time.Duration) (int64, error) {
			return mysqlinbox.Purge(ctx, sqlDB(db), consumer, olderThan)
		},
	}
}

// TestStore runs the inbox's store suite (the contract of Consumer.Handle that
// PostgreSQL passes too) on MySQL/MariaDB.
func TestStore(t *testing.T) {
	t.Parallel()
	inboxtest.RunStore(t, mysqlStore())
}

// TestEightProcessesRaceOverTripledMessages runs the race of real processes
// (inboxtest.RunRace) on MySQL/MariaDB.
func TestEightProcessesRaceOverTripledMessages(t *testing.T) {
	inboxtest.RunRace(t, mysqlStore())
}

// BenchmarkStore measures the inbox's cost per message on MySQL/MariaDB
// (inboxtest.BenchStore).
func BenchmarkStore(b *testing.B) {
	inboxtest.BenchStore(b, mysqlStore())
}
