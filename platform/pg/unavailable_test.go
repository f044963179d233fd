package pg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"example.com/shop/platform/pg"
	"example.com/shop/testkit"
)

func TestUnavailableClassifiesOutagesOnARealDatabase(t *testing.T) {
	t.Parallel()
	pool, url := testkit.NewDatabase(t, nil)
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	// A statement the server refuses is not an outage.
	_, err = pool.Exec(ctx, `SELECT * FROM no_such_table`)
	if err == nil || pg.Unavailable(err) {
		t.Fatalf("undefined table: %v classified as unavailable", err)
	}

	restore := testkit.RefuseConnections(t, url)
	// The held session was terminated: 57P01 or a dropped connection.
	_, err = conn.Exec(ctx, `SELECT 1`)
	if err == nil || !pg.Unavailable(err) {
		t.Fatalf("terminated session: %v not classified as unavailable", err)
	}
	// New connections are refused with a *pgconn.ConnectError, once the
	// pool has found its other idle sessions terminated.
	var connErr *pgconn.ConnectError
	for i := 0; !errors.As(err, &connErr); i++ {
		_, err = pool.Exec(ctx, `SELECT 1`)
		if !pg.Unavailable(err) {
			t.Fatalf("during the outage: %v (%T) not classified as unavailable", err, err)
		}
		if i == 10 {
			t.Fatalf("no connect error after %d statements: %v", i, err)
		}
	}
	// A deadline while waiting for the database.
	short, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-short.Done()
	if _, err := pool.Exec(short, `SELECT 1`); err == nil || !pg.Unavailable(err) {
		t.Fatalf("deadline: %v not classified as unavailable", err)
	}
	restore()
	if _, err := pool.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("after the outage: %v", err)
	}
}

func TestUnavailableCodes(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		"08006": true, "08001": true, "57P01": true, "57P02": true, "57P03": true, "53300": true,
		"23505": false, "40001": false, "42P01": false, "57014": false,
	} {
		err := fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code})
		if got := pg.Unavailable(err); got != want {
			t.Errorf("Unavailable(SQLSTATE %s) = %v, want %v", code, got, want)
		}
	}
	if pg.Unavailable(nil) || pg.Unavailable(context.Canceled) || pg.Unavailable(errors.New("boom")) {
		t.Error("nil, Canceled or a plain error classified as unavailable")
	}
}
