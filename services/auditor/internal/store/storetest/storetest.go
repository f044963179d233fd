// Package storetest gives the auditor's tests the three databases it reads, migrated
// with the services' own migration files, read from the repository rather than
// imported (services do not import each other).
package storetest

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/testkit"
)

// sqlFiles shows only the .sql files of a folder.
type sqlFiles struct{ fs.FS }

func (s sqlFiles) ReadDir(name string) ([]fs.DirEntry, error) {
	all, err := fs.ReadDir(s.FS, name)
	var out []fs.DirEntry
	for _, e := range all {
		if path.Ext(e.Name()) == ".sql" {
			out = append(out, e)
		}
	}
	return out, err
}

// Migrations returns the migrations folder of service ("order", "stock", "shipping").
func Migrations(service string) fs.FS {
	_, file, _, _ := runtime.Caller(0)
	return sqlFiles{os.DirFS(filepath.Join(filepath.Dir(file), "..", "..", "..", "..", service, "migrations"))}
}

// Database is one migrated test database.
type Database struct {
	Pool *pgxpool.Pool
	URL  string
}

// New returns a fresh database of each service, migrated, dropped when t ends.
func New(t testing.TB) (order, stock, shipping Database) {
	t.Helper()
	db := func(service string) Database {
		p, u := testkit.NewDatabase(t, Migrations(service))
		return Database{Pool: p, URL: u}
	}
	return db("order"), db("stock"), db("shipping")
}
