// Package migratetest proves that a database migrated by an older release reaches,
// with a service's migrate.Schema, the schema a fresh database gets, its rows kept.
package migratetest

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/migrate"
	"example.com/shop/testkit"
)

// Upgrade migrates a database with legacy (the migrations an older release shipped,
// in goose's default version table), runs seed in it (SQL that writes rows), then
// migrates it with schema. It fails t unless the database then has the schema of a
// fresh database migrated with schema (Describe) and every row seed left, unchanged,
// and unless migrating either database again applies nothing. It returns a pool on
// the upgraded database.
func Upgrade(t *testing.T, legacy fs.FS, schema migrate.Schema, seed string) *pgxpool.Pool {
	t.Helper()
	ctx := testkit.Context(t)
	pool, url := testkit.NewDatabase(t, migrate.Schema{{Name: "legacy", FS: legacy}})
	if _, err := pool.Exec(ctx, seed); err != nil {
		t.Fatalf("seed the legacy database: %v", err)
	}
	cols := columns(t, pool)
	before := rowsOf(t, pool, cols)
	if _, err := migrate.Up(ctx, url, schema); err != nil {
		t.Fatalf("migrate the legacy database: %v", err)
	}
	pool.Reset() // connections may hold plans of the old schema
	// The columns the legacy rows had keep their values; a column a migration adds
	// holds its default.
	if after := rowsOf(t, pool, cols); after != before {
		t.Errorf("rows changed by the migration:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	fresh, freshURL := testkit.NewDatabase(t, schema)
	if got, want := Describe(t, pool), Describe(t, fresh); got != want {
		t.Errorf("upgraded schema differs from a fresh one:\n%s", diff(got, want))
	}
	for name, u := range map[string]string{"upgraded": url, "fresh": freshURL} {
		if again, err := migrate.Up(ctx, u, schema); err != nil || len(again) > 0 {
			t.Errorf("migrating the %s database again: applied %+v, %v; want nothing", name, again, err)
		}
	}
	return pool
}

// describe lists what makes a schema, one line per fact, in a stable order. Column
// positions and constraint names are left out: the code names columns, and a
// constraint is known by its definition (a table that began under another service's
// migrations may have them in another order or under another name).
var describe = []string{
	`SELECT format('column %s.%s %s%s default %s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
	        CASE WHEN a.attnotnull THEN ' not null' ELSE '' END, pg_get_expr(d.adbin, d.adrelid))
	 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
	 LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm') AND a.attnum > 0 AND NOT a.attisdropped`,
	`SELECT format('relation %s %s', relname, relkind) FROM pg_class WHERE relnamespace = 'public'::regnamespace`,
	`SELECT format('constraint %s %s', conrelid::regclass, pg_get_constraintdef(oid)) FROM pg_constraint
	 WHERE connamespace = 'public'::regnamespace`,
	`SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'`,
	`SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
	 WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal`,
	`SELECT pg_get_functiondef(oid) FROM pg_proc WHERE pronamespace = 'public'::regnamespace`,
	`SELECT format('grant %s on %s to %s', p.privilege_type, c.relname, p.grantee::regrole)
	 FROM pg_class c, aclexplode(c.relacl) p WHERE c.relnamespace = 'public'::regnamespace`,
	`SELECT format('grant %s (%s) on %s to %s', p.privilege_type, a.attname, c.relname, p.grantee::regrole)
	 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid, aclexplode(a.attacl) p
	 WHERE c.relnamespace = 'public'::regnamespace`,
	`SELECT format('default grant %s on %s to %s', p.privilege_type, d.defaclobjtype, p.grantee::regrole)
	 FROM pg_default_acl d, aclexplode(d.defaclacl) p`,
}

// Describe returns the schema of pool's database (its public schema) as sorted
// lines: columns with type, nullability and default, relations, constraints,
// indexes, triggers, functions, and the privileges on tables, columns and future
// tables.
func Describe(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	var all []string
	for _, q := range describe {
		rows, err := pool.Query(testkit.Context(t), q+` ORDER BY 1`)
		if err != nil {
			t.Fatalf("describe: %v", err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("describe: %v", err)
		}
		all = append(all, lines...)
	}
	return strings.Join(all, "\n")
}

// columns lists the columns of every table of pool's database but goose's version
// tables, by table, in column order.
func columns(t testing.TB, pool *pgxpool.Pool) map[string][]string {
	t.Helper()
	rows, err := pool.Query(testkit.Context(t), `SELECT table_name::text, column_name::text FROM information_schema.columns
		WHERE table_schema = 'public' AND table_name NOT LIKE 'goose_db_version%' ORDER BY table_name, ordinal_position`)
	if err != nil {
		t.Fatalf("list columns: %v", err)
	}
	out := map[string][]string{}
	var table, column string
	if _, err := pgx.ForEachRow(rows, []any{&table, &column}, func() error {
		out[table] = append(out[table], pgx.Identifier{column}.Sanitize())
		return nil
	}); err != nil {
		t.Fatalf("list columns: %v", err)
	}
	return out
}

// rowsOf returns the rows of each table of cols, its columns of cols only, as text
// in a stable order.
func rowsOf(t testing.TB, pool *pgxpool.Pool, cols map[string][]string) string {
	t.Helper()
	ctx := testkit.Context(t)
	tables := make([]string, 0, len(cols))
	for table := range cols {
		tables = append(tables, table)
	}
	slices.Sort(tables)
	var b strings.Builder
	for _, table := range tables {
		var text string
		name := pgx.Identifier{table}.Sanitize()
		row := "ROW(" + strings.Join(cols[table], ", ") + ")::text"
		if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(`+row+`, E'\n' ORDER BY `+row+`), '') FROM `+name).Scan(&text); err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		fmt.Fprintf(&b, "%s:\n%s\n", table, text)
	}
	return b.String()
}

// diff lists the lines only one of got and want has.
func diff(got, want string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	g, w := in(got), in(want)
	var b strings.Builder
	for l := range g {
		if !w[l] {
			fmt.Fprintf(&b, "only upgraded: %s\n", l)
		}
	}
	for l := range w {
		if !g[l] {
			fmt.Fprintf(&b, "only fresh:    %s\n", l)
		}
	}
	return b.String()
}
