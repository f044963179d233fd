package dlq

import (
	"embed"
	"io/fs"

	"example.com/shop/platform/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Roles names a service's database roles for the dead_letter table's grants.
type Roles struct {
	App         string // the consumer, which records dead letters: SELECT, INSERT
	Maintenance string // runs dlq: SELECT, UPDATE (resolved_at, resolution)
}

// Migrations returns the dead_letter table as a migration set of its own
// (version table goose_db_version_dead_letter), for the service's
// migrate.Schema: the platform ships the table, the service names its roles.
func Migrations(roles Roles) migrate.Set {
	files, _ := fs.Sub(migrations, "migrations") // a valid path: cannot fail
	return migrate.Set{Name: "dead_letter", FS: files, Table: "goose_db_version_dead_letter",
		Roles: map[string]string{"app": roles.App, "maintenance": roles.Maintenance}}
}
