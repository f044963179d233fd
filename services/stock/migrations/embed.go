// Package migrations holds the stock database's schema: the platform's tables it
// uses and stock's own goose SQL migrations, embedded so that the binary can apply
// them (bin/stock migrate).
package migrations

import (
	"embed"

	"example.com/shop/platform/dlq"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/outbox"
)

//go:embed *.sql
var own embed.FS

// Schema is what `stock migrate` applies, in this order: the platform's inbox,
// dead letters and outbox (stock's answers, docs/architecture.md rule 6), with the
// roles of deploy/postgres/roles.sql, then stock's own tables. A database whose own migrations created the inbox and the dead letters
// before the platform shipped them goes on from version 30, the last of those.
var Schema = migrate.Schema{
	inbox.Migrations(inbox.Roles{App: "stock_app", Maintenance: "stock_maintenance"}),
	dlq.Migrations(dlq.Roles{App: "stock_app", Maintenance: "stock_maintenance"}),
	outbox.Migrations(outbox.Roles{Writer: "stock_app", Relay: "stock_relay", Maintenance: "stock_maintenance"}),
	{Name: "stock", FS: own, From: 30},
}
