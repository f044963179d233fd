package main

import (
	"example.com/shop/contracts"
	"example.com/shop/platform/consumerapp"
	"example.com/shop/services/shipping/internal/events"
	"example.com/shop/services/shipping/migrations"
)

// registered is the service's entry in the registry (contracts/registry.go): its
// database, its ports and its variables' prefix are the defaults below.
var registered = contracts.MustService(name)

// service names shipping to the platform and sets the defaults of its variables
// (docs/operations.md lists every variable; `shipping help <command>` prints what a
// command reads, with the defaults). serve reads consumerapp.ServeConfig, whose
// own variables start with SHIPPING_ (SHIPPING_DATABASE_URL, SHIPPING_WORKERS,
// SHIPPING_PREFETCH, SHIPPING_INBOX_GROUP, SHIPPING_INBOX_TX, SHIPPING_MAX_ATTEMPTS,
// SHIPPING_RETRY_DELAYS); migrate, purge-inbox and dlq read consumerapp.ToolConfig.
// The defaults: the registry's database and address, 256 workers, inbox group
// 128 (group commit on, as stock: its group handlers write a group's statuses and
// shipments in one statement; many workers let the groups fill).
var service = consumerapp.Service{
	Name:        name,
	EnvPrefix:   registered.EnvPrefix(),
	DatabaseURL: registered.LocalDatabaseURL(),
	HTTPAddr:    registered.HTTPAddr,
	Workers:     256,
	InboxGroup:  128,
	Schema:      migrations.Schema,
	Stale:       events.Stale,
}
