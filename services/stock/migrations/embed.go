// Package migrations holds the stock database's schema: the platform's tables it
// uses and stock's own goose SQL migrations, embedded so that the binary can apply
// them (bin/stock migrate).
package migrations

import (
	"embed"

	"example.com/shop/platform/dlq"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/migrate"
)

//go:embed *.sql
var own embed.FS

// Schema is what `stock migrate` applies, in this order: the platform's inbox and
// dead letters, with the roles of deploy/postgres/roles.sql, then stock's own
// tables. A database whose own migrations created the inbox and the dead letters
// before the platform shipped them goes on from version 30, the last of those.
var Schema = migrate.Schema{
	inbox.Migrations(inbox.Roles{App: "stock_app", Maintenance: "stock_maintenance"}),
	dlq.Migrations(dlq.Roles{App: "stock_app", Maintenance: "stock_maintenance"}),
	{Name: "stock", FS: own, From: 30},
}
