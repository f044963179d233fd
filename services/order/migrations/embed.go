// Package migrations holds the order database's schema: the platform's tables it
// uses and order's own goose SQL migrations, embedded so that the binary can apply
// them (bin/order migrate).
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

// Schema is what `order migrate` applies, in this order: the platform's outbox,
// inbox (stock's answers under consumer "order", the API's Idempotency-Keys under
// "order-api") and dead letters, with the roles of deploy/postgres/roles.sql, then
// order's own tables. A database whose own migrations created the outbox and
// the inbox before the platform shipped them goes on from version 40, the last of
// those.
var Schema = migrate.Schema{
	outbox.Migrations(outbox.Roles{Writer: "order_api", Relay: "order_relay", Maintenance: "order_maintenance"}),
	inbox.Migrations(inbox.Roles{App: "order_api", Maintenance: "order_maintenance"}),
	dlq.Migrations(dlq.Roles{App: "order_api", Maintenance: "order_maintenance"}),
	{Name: "order", FS: own, From: 40},
}
