package pg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/pg"
	"example.com/shop/testkit"
)

func newTable(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := testkit.NewDatabase(t, nil)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE item (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

func count(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM item`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWithTxCommits(t *testing.T) {
	t.Parallel()
	pool := newTable(t)
	err := pg.WithTx(context.Background(), pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `INSERT INTO item VALUES (1)`)
		return err
	})
	if err != nil {
		t.Fatalf("WithTx: %v", err)
	}
	if n := count(t, pool); n != 1 {
		t.Fatalf("rows = %d, want 1", n)
	}
	if acquired := pool.Stat().AcquiredConns(); acquired != 0 {
		t.Fatalf("connections still acquired: %d", acquired)
	}
}

func TestWithTxRollsBackOnError(t *testing.T) {
	t.Parallel()
	pool := newTable(t)
	boom := errors.New("boom")
	err := pg.WithTx(context.Background(), pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), `INSERT INTO item VALUES (1)`); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if n := count(t, pool); n != 0 {
		t.Fatalf("rows = %d, want 0", n)
	}
	if acquired := pool.Stat().AcquiredConns(); acquired != 0 {
		t.Fatalf("connections still acquired: %d", acquired)
	}
}

func TestWithTxRollsBackOnPanic(t *testing.T) {
	t.Parallel()
	pool := newTable(t)
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the original panic", p)
			}
		}()
		_ = pg.WithTx(context.Background(), pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(context.Background(), `INSERT INTO item VALUES (1)`); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if n := count(t, pool); n != 0 {
		t.Fatalf("rows = %d, want 0", n)
	}
	if acquired := pool.Stat().AcquiredConns(); acquired != 0 {
		t.Fatalf("connections still acquired: %d", acquired)
	}
}

func TestWithTxReturnsCommitError(t *testing.T) {
	t.Parallel()
	pool := newTable(t)
	if _, err := pool.Exec(context.Background(),
		`ALTER TABLE item ADD COLUMN ref int UNIQUE DEFERRABLE INITIALLY DEFERRED`); err != nil {
		t.Fatal(err)
	}
	// A deferred constraint fails at COMMIT, not at the statement.
	err := pg.WithTx(context.Background(), pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `INSERT INTO item VALUES (1, 7), (2, 7)`)
		return err
	})
	if err == nil {
		t.Fatal("WithTx returned nil for a failing commit")
	}
	if n := count(t, pool); n != 0 {
		t.Fatalf("rows = %d, want 0", n)
	}
}

func TestEnsureDatabaseIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	url := testkit.EmptyDatabaseURL(t)
	ctx := context.Background()
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- pg.EnsureDatabase(ctx, url) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("EnsureDatabase: %v", err)
		}
	}
	pool, err := pg.NewPool(ctx, url)
	if err != nil {
		t.Fatalf("NewPool on created database: %v", err)
	}
	pool.Close()
}

func TestNewPoolNamesUnreachableDatabase(t *testing.T) {
	t.Parallel()
	_, err := pg.NewPool(context.Background(), "postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2")
	if err == nil {
		t.Fatal("NewPool succeeded on a closed port")
	}
}

func TestEnsureDatabaseAcceptsPoolSettings(t *testing.T) {
	t.Parallel()
	url := testkit.EmptyDatabaseURL(t) + "&pool_max_conns=3"
	if err := pg.EnsureDatabase(context.Background(), url); err != nil {
		t.Fatalf("EnsureDatabase with pool_max_conns: %v", err)
	}
	pool, err := pg.NewPool(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if got := pool.Config().MaxConns; got != 3 {
		t.Fatalf("MaxConns = %d, want 3", got)
	}
}

// Close closes a healthy pool at once, and gives up after CloseTimeout on
// one whose connection is still acquired (a pool closes only when every
// connection is back), instead of waiting for it.
func TestCloseIsBounded(t *testing.T) {
	if !pg.Close(nil) {
		t.Fatal("Close(nil) = false")
	}
	pool, err := pg.NewPool(t.Context(), testkit.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if !pg.Close(pool) {
		t.Fatal("a healthy pool did not close in time")
	}

	held, err := pg.NewPool(t.Context(), testkit.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := held.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if pg.Close(held) {
		t.Fatal("a pool with a connection still acquired reported closed")
	}
	if took := time.Since(start); took < pg.CloseTimeout || took > pg.CloseTimeout+time.Second {
		t.Fatalf("Close took %v, want about %v", took, pg.CloseTimeout)
	}
	conn.Release()
}
