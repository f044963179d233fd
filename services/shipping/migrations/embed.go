// Package migrations holds the shipping database's schema: the platform's tables it
// uses and shipping's own goose SQL migrations, embedded so that the binary can apply
// them (bin/shipping migrate).
package migrations

import (
	"embed"

	"example.com/shop/platform/dlq"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/migrate"
)

//go:embed *.sql
var own embed.FS

// Schema is what `shipping migrate` applies, in this order: the platform's inbox and
// dead letters, with the roles of deploy/postgres/roles.sql, then shipping's own
// tables. A database whose own migrations created the inbox and the dead letters
// before the platform shipped them goes on from version 21, the last of those.
var Schema = migrate.Schema{
	inbox.Migrations(inbox.Roles{App: "shipping_app", Maintenance: "shipping_maintenance"}),
	dlq.Migrations(dlq.Roles{App: "shipping_app", Maintenance: "shipping_maintenance"}),
	{Name: "shipping", FS: own, From: 21},
}
