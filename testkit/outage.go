package testkit

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// RefuseConnections makes the test database of databaseURL (one NewDatabase
// made) refuse new connections (ALTER DATABASE ... ALLOW_CONNECTIONS false)
// and terminates its open sessions, whose next statement then fails with
// SQLSTATE 57P01. It returns a function that allows connections again; it is
// also called when the test ends, and calling it twice is harmless. The
// outage touches only that database, never the server.
func RefuseConnections(t testing.TB, databaseURL string) (restore func()) {
	t.Helper()
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	name := pgx.Identifier{cfg.Database}.Sanitize()
	admin := func(sql string, args ...any) {
		t.Helper()
		ctx, cancel := bounded()
		defer cancel()
		conn, err := pgx.Connect(ctx, DatabaseURL(t))
		if err != nil {
			t.Errorf("testkit: connect: %v", err)
			return
		}
		defer conn.Close(context.WithoutCancel(ctx))
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Errorf("testkit: %s: %v", sql, err)
		}
	}
	admin("ALTER DATABASE " + name + " ALLOW_CONNECTIONS false")
	admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", cfg.Database)
	restored := false
	restore = func() {
		t.Helper()
		if !restored {
			restored = true
			admin("ALTER DATABASE " + name + " ALLOW_CONNECTIONS true")
		}
	}
	t.Cleanup(restore)
	return restore
}
