package inbox

import (
	"embed"
	"io/fs"

	"example.com/shop/platform/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Roles names a service's database roles for the inbox's grants.
type Roles struct {
	App         string // handles messages: SELECT, INSERT and UPDATE (result) on processed_event
	Maintenance string // runs purge-inbox and dlq: SELECT, DELETE and INSERT (consumer, message_key, payload_sha256, outcome) on processed_event
}

// Migrations returns the processed_event table as a migration set of its own
// (version table goose_db_version_inbox), for the service's migrate.Schema:
// the platform ships the table, the service names its roles.
func Migrations(roles Roles) migrate.Set {
	files, _ := fs.Sub(migrations, "migrations") // a valid path: cannot fail
	return migrate.Set{Name: "inbox", FS: files, Table: "goose_db_version_inbox",
		Roles: map[string]string{"app": roles.App, "maintenance": roles.Maintenance}}
}
