package migrate_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
	"example.com/shop/testkit"
)

// dir is the schema of one set, testdata/name, with goose's default version table.
func dir(name string) migrate.Schema {
	return migrate.Schema{{Name: name, FS: os.DirFS("testdata/" + name)}}
}

func TestUpCreatesDatabaseAndIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testkit.EmptyDatabaseURL(t)

	applied, err := migrate.Up(ctx, url, dir("v1"))
	if err != nil {
		t.Fatalf("first Up: %v", err)
	}
	if len(applied) != 1 || applied[0].Version != 1 {
		t.Fatalf("applied = %+v, want version 1", applied)
	}
	again, err := migrate.Up(ctx, url, dir("v1"))
	if err != nil {
		t.Fatalf("second Up: %v", err)
	}
	if len(again) != 0 {
		t.Fatalf("second Up applied %+v, want nothing", again)
	}
	more, err := migrate.Up(ctx, url, dir("v2"))
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
			applied, err := migrate.Up(ctx, url, dir("v2"))
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
	tmp := t.TempDir()
	if err := os.WriteFile(tmp+"/00001_bad.sql", []byte("-- +goose Up\nCREATE TABLE (;\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(context.Background(), testkit.EmptyDatabaseURL(t), migrate.Schema{{Name: "bad", FS: os.DirFS(tmp)}}); err == nil {
		t.Fatal("Up succeeded with a broken migration")
	}
}

// A platform part and a service's own set both start at version 1, each in its own
// version table; the part's placeholder names a role, which Up creates when missing.
func TestSetsKeepTheirOwnVersionsAndRoles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testkit.EmptyDatabaseURL(t)
	const reader = "migrate_test_reader"
	part := migrate.Set{Name: "part", FS: os.DirFS("testdata/part"), Table: "goose_db_version_part",
		Roles: map[string]string{"reader": reader}}
	schema := append(migrate.Schema{part}, dir("v2")...)
	applied, err := migrate.Up(ctx, url, schema)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 3 || applied[0].Set != "part" || applied[0].Version != 1 || applied[1].Set != "v2" || applied[1].Version != 1 {
		t.Fatalf("applied = %+v, want part 1, then v2 1 and 2", applied)
	}
	if again, err := migrate.Up(ctx, url, schema); err != nil || len(again) != 0 {
		t.Fatalf("second Up: %+v, %v; want nothing applied", again, err)
	}
	pool, err := pg.NewPool(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var partVersions, ownVersions int
	var granted bool
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM goose_db_version_part WHERE version_id > 0),
		(SELECT count(*) FROM goose_db_version WHERE version_id > 0),
		has_table_privilege($1, 'gadget', 'SELECT')`, reader).Scan(&partVersions, &ownVersions, &granted); err != nil {
		t.Fatal(err)
	}
	if partVersions != 1 || ownVersions != 2 || !granted {
		t.Errorf("part versions %d, own versions %d, %s may read gadget: %v; want 1, 2, true", partVersions, ownVersions, reader, granted)
	}
}

func TestUpRefusesBadRoles(t *testing.T) {
	t.Parallel()
	for name, roles := range map[string]map[string]string{
		"missing":        {"writer": "migrate_test_reader"},
		"not a name":     {"reader": "reader; DROP TABLE gadget"},
		"quoting needed": {"reader": "Reader"},
	} {
		part := migrate.Set{Name: "part", FS: os.DirFS("testdata/part"), Table: "goose_db_version_part", Roles: roles}
		if _, err := migrate.Up(context.Background(), testkit.EmptyDatabaseURL(t), migrate.Schema{part}); err == nil {
			t.Errorf("%s role: Up succeeded", name)
		}
	}
}

// A set with From refuses a database that has it applied below From and no other
// set of the schema (one that predates them), and leaves a database that has the
// other sets, also below From (one the schema created).
func TestUpRefusesASetBelowFrom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old, fresh := testkit.EmptyDatabaseURL(t), testkit.EmptyDatabaseURL(t)
	if _, err := migrate.Up(ctx, old, dir("v1")); err != nil {
		t.Fatal(err)
	}
	part := migrate.Set{Name: "part", FS: os.DirFS("testdata/part"), Table: "goose_db_version_part",
		Roles: map[string]string{"reader": "migrate_test_reader"}}
	schema := migrate.Schema{part, {Name: "v2", FS: os.DirFS("testdata/v2"), From: 3}}
	_, err := migrate.Up(ctx, old, schema)
	if err == nil || !strings.Contains(err.Error(), "older than 3") {
		t.Fatalf("Up of a database at version 1 with From 3: err = %v, want a refusal", err)
	}
	for _, run := range []string{"first", "second"} {
		if _, err := migrate.Up(ctx, fresh, schema); err != nil {
			t.Fatalf("%s Up of a fresh database: %v", run, err)
		}
	}
}
