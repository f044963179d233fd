// Package migrations holds the stock database's goose SQL migrations, embedded so that
// the binary can apply them (bin/stock migrate).
package migrations

import "embed"

// FS holds the migrations at its root, named NNNNN_name.sql, for migrate.Up and
// testkit.NewDatabase.
//
//go:embed *.sql
var FS embed.FS
