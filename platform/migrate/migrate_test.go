package migrate_test

import (
	"context"
	"os"
	"testing"

	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/testkit"
)

func TestUpCreatesDatabaseAndIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testkit.EmptyDatabaseURL(t)

	applied, err := migrate.Up(ctx, url, os.DirFS("testdata/v1"))
	if err != nil {
		t.Fatalf("first Up: %v", err)
	}
	if len(applied) != 1 || applied[0].Version != 1 {
		t.Fatalf("applied = %+v, want version 1", applied)
	}
	again, err := migrate.Up(ctx, url, os.DirFS("testdata/v1"))
	if err != nil {
		t.Fatalf("second Up: %v", err)
	}
	if len(again) != 0 {
		t.Fatalf("second Up applied %+v, want nothing", again)
	}
	more, err := migrate.Up(ctx, url, os.DirFS("testdata/v2"))
	if err != nil {
		t.Fatalf("Up with a new migration: %v", err)
	}
	if len(more) != 1 || more[0].Version != 2 {
		t.Fatalf("applied = %+v, want version 2 only", more)
	}

	pool, err := pg.NewPool(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `INSERT INTO widget (id, name) VALUES (1, 'a')`); err != nil {
		t.Fatalf("migrated table unusable: %v", err)
	}
}

func TestConcurrentUpAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testkit.EmptyDatabaseURL(t)
	const runs = 4
	type result struct {
		n   int
		err error
	}
	results := make(chan result, runs)
	for range runs {
		go func() {
			applied, err := migrate.Up(ctx, url, os.DirFS("testdata/v2"))
			results <- result{len(applied), err}
		}()
	}
	total := 0
	for range runs {
		r := <-results
		if r.err != nil {
			t.Fatalf("concurrent Up: %v", r.err)
		}
		total += r.n
	}
	if total != 2 {
		t.Fatalf("migrations applied across runs = %d, want 2", total)
	}
	pool, err := pg.NewPool(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var versions int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != 2 {
		t.Fatalf("goose_db_version rows = %d, want 2", versions)
	}
}

func TestUpReportsBadMigration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/00001_bad.sql", []byte("-- +goose Up\nCREATE TABLE (;\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(context.Background(), testkit.EmptyDatabaseURL(t), os.DirFS(dir)); err == nil {
		t.Fatal("Up succeeded with a broken migration")
	}
}
