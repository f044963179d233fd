package outbox

import (
	"embed"
	"io/fs"

	"example.com/shop/platform/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Roles names a service's database roles for the outbox's grants.
type Roles struct {
	Writer      string // writes events in the business transaction: INSERT on outbox
	Relay       string // publishes them: SELECT, UPDATE (published_at, attempts, last_error)
	Maintenance string // purge-outbox and replay-outbox: SELECT, DELETE, UPDATE (those and replays)
}

// Migrations returns the outbox table, its indexes, its NOTIFY trigger and
// outbox_key_hash as a migration set of its own (version table
// goose_db_version_outbox), for the service's migrate.Schema: the platform ships
// the table, the service names its roles.
func Migrations(roles Roles) migrate.Set {
	files, _ := fs.Sub(migrations, "migrations") // a valid path: cannot fail
	return migrate.Set{Name: "outbox", FS: files, Table: "goose_db_version_outbox",
		Roles: map[string]string{"writer": roles.Writer, "relay": roles.Relay, "maintenance": roles.Maintenance}}
}
