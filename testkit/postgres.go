package testkit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/config"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
)

// findPostgres connects to TEST_DATABASE_URL (default the local server) once.
func findPostgres() (string, error) {
	url := getenvOr("TEST_DATABASE_URL", defaultDatabaseURL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", fmt.Errorf("%s does not answer (%v); %s", config.MaskURL(url), err, startServers)
	}
	conn.Close(ctx)
	return url, nil
}

// NewDatabase creates a fresh, uniquely named database on the test server,
// applies schema (nil for an empty database), and drops it when the test
// ends. It returns an open pool on it (closed at cleanup) and its URL.
//
// The schema is migrated once per test binary into a template database named
// after a hash of its sets; each test then clones the template with
// CREATE DATABASE ... TEMPLATE, which takes milliseconds.
func NewDatabase(t testing.TB, schema migrate.Schema) (*pgxpool.Pool, string) {
	t.Helper()
	server := DatabaseURL(t)
	ctx, cancel := bounded()
	defer cancel()

	template := ""
	if len(schema) > 0 {
		template = templateFor(t, server, schema)
	}
	name := dbName(t)
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatalf("testkit: connect: %v", err)
	}
	defer admin.Close(ctx)
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := admin.Exec(ctx, stmt); err != nil {
		t.Fatalf("testkit: %s: %v", stmt, err)
	}
	url := withDatabase(t, server, name)
	t.Cleanup(func() { DropDatabase(t, server, name) })

	pool, err := pg.NewPool(ctx, url)
	if err != nil {
		t.Fatalf("testkit: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, url
}

// EmptyDatabaseURL reserves a unique database name on the test server without
// creating it, for tests of code that creates databases itself; any database
// of that name is dropped when the test ends.
func EmptyDatabaseURL(t testing.TB) string {
	t.Helper()
	server := DatabaseURL(t)
	name := dbName(t)
	t.Cleanup(func() { DropDatabase(t, server, name) })
	return withDatabase(t, server, name)
}

// DropDatabase drops database name (its sessions ended first) on the server of
// URL server, a maintenance database such as DatabaseURL's; a database that
// does not exist is not an error. A failure fails t without stopping it.
func DropDatabase(t testing.TB, server, name string) {
	ctx, cancel := bounded()
	defer cancel()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Errorf("testkit: drop %s: %v", name, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("testkit: drop %s: %v", name, err)
	}
}

// templateFor returns the name of a migrated template database for schema,
// building it at most once per server even across concurrent test binaries:
// a session advisory lock serialises builders, and a template is built under
// a temporary name and renamed only once fully migrated.
func templateFor(t testing.TB, server string, schema migrate.Schema) string {
	t.Helper()
	h := sha256.New()
	for _, set := range schema {
		fmt.Fprintf(h, "%s\x00%s\x00", set.Name, set.Table)
		hashFS(t, h, set.Files())
	}
	hash := hex.EncodeToString(h.Sum(nil))
	found.tmplMu.Lock()
	defer found.tmplMu.Unlock()
	if name, ok := found.tmpl[hash]; ok {
		return name
	}
	ctx, cancel := bounded()
	defer cancel()
	name := "tmpl_" + hash[:16]
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatalf("testkit: connect: %v", err)
	}
	defer admin.Close(ctx)
	const lockKey = 7_304_215_001 // any constant shared by testkit users
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		t.Fatalf("testkit: template lock: %v", err)
	}
	defer admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockKey) //nolint:errcheck // the session ends right after

	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatalf("testkit: look up template: %v", err)
	}
	if !exists {
		wip := name + "_wip"
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{wip}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Fatalf("testkit: drop stale template: %v", err)
		}
		if _, err := migrate.Up(ctx, withDatabase(t, server, wip), schema); err != nil {
			t.Fatalf("testkit: migrate template: %v", err)
		}
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{wip}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Fatalf("testkit: publish template: %v", err)
		}
	}
	found.tmpl[hash] = name
	return name
}

// hashFS writes every file's path and content in fsys to h, in path order.
func hashFS(t testing.TB, h io.Writer, fsys fs.FS) {
	t.Helper()
	var paths []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		t.Fatalf("testkit: read migrations: %v", err)
	}
	sort.Strings(paths)
	for _, p := range paths {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			t.Fatalf("testkit: read migrations: %v", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
	}
}

func withDatabase(t testing.TB, server, name string) string {
	t.Helper()
	u, err := url.Parse(server)
	if err != nil || u.Scheme == "" {
		t.Fatalf("testkit: %s must be a postgres:// URL", config.MaskURL(server))
	}
	u.Path = "/" + name
	return u.String()
}
