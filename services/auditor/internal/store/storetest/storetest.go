// Package storetest gives the auditor's tests the three databases it reads, migrated
// with the platform's tables each service uses and the service's own migration
// files, read from the repository rather than imported (services do not import each
// other).
package storetest

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/dlq"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/auditor/internal/store"
	"example.com/shop/testkit"
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

// Schema returns the schema of service ("order", "stock", "shipping") as its
// migrations.Schema lists it: the platform's parts it uses, then its migrations folder.
func Schema(service string) migrate.Schema {
	_, file, _, _ := runtime.Caller(0)
	own := migrate.Set{Name: service, FS: sqlFiles{os.DirFS(filepath.Join(filepath.Dir(file), "..", "..", "..", "..", service, "migrations"))}}
	if service == "order" {
		return migrate.Schema{
			outbox.Migrations(outbox.Roles{Writer: "order_api", Relay: "order_relay", Maintenance: "order_maintenance"}),
			inbox.Migrations(inbox.Roles{App: "order_api", Maintenance: "order_maintenance"}),
			dlq.Migrations(dlq.Roles{App: "order_api", Maintenance: "order_maintenance"}),
			own,
		}
	}
	app, maintenance := service+"_app", service+"_maintenance"
	schema := migrate.Schema{
		inbox.Migrations(inbox.Roles{App: app, Maintenance: maintenance}),
		dlq.Migrations(dlq.Roles{App: app, Maintenance: maintenance}),
	}
	if service == "stock" { // stock publishes its answers through its own outbox
		schema = append(schema, outbox.Migrations(outbox.Roles{Writer: app, Relay: "stock_relay", Maintenance: maintenance}))
	}
	return append(schema, own)
}

// Store returns a store on the three databases: order's and stock's as the
// producers', and each as the consumer of the same name.
func Store(order, stock, shipping Database) *store.Store {
	return store.New(
		map[string]*pgxpool.Pool{contracts.ProducerOrder: order.Pool, contracts.ProducerStock: stock.Pool},
		map[string]*pgxpool.Pool{contracts.ConsumerOrder: order.Pool, contracts.ConsumerStock: stock.Pool, contracts.ConsumerShipping: shipping.Pool})
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
		p, u := testkit.NewDatabase(t, Schema(service))
		return Database{Pool: p, URL: u}
	}
	return db("order"), db("stock"), db("shipping")
}
