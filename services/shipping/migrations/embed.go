// Package migrations holds the shipping database's goose SQL migrations,
// embedded so the binary can apply them itself (bin/shipping migrate).
package migrations

import "embed"

// FS holds the migration files (NNNNN_name.sql) at its root, for migrate.Up.
//
//go:embed *.sql
var FS embed.FS
