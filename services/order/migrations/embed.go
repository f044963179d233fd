// Package migrations holds the order database's goose SQL migrations,
// embedded so that the binary can apply them (bin/order migrate).
package migrations

import "embed"

// FS holds the migrations at its root, named NNNNN_name.sql, for
// migrate.Up and testkit.NewDatabase.
//
//go:embed *.sql
var FS embed.FS
