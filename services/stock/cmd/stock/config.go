package main

import (
	"example.com/shop/contracts"
	"example.com/shop/platform/consumerapp"
	"example.com/shop/platform/producerapp"
	"example.com/shop/services/stock/internal/events"
	"example.com/shop/services/stock/migrations"
)

// registered is the service's entry in the registry (contracts/registry.go): its
// database, its ports and its variables' prefix are the defaults below.
var registered = contracts.MustService(name)

// service names stock to the platform and sets the defaults of its variables
// (docs/operations.md lists every variable; `stock help <command>` prints what a
// command reads, with the defaults). serve reads consumerapp.ServeConfig, whose
// own variables start with STOCK_ (STOCK_DATABASE_URL, STOCK_WORKERS,
// STOCK_PREFETCH, STOCK_INBOX_GROUP, STOCK_INBOX_TX, STOCK_MAX_ATTEMPTS,
// STOCK_RETRY_DELAYS); migrate, purge-inbox and dlq read consumerapp.ToolConfig.
// relay, purge-outbox and replay-outbox read producer's configuration
// (producerapp.RelayConfig, producerapp.ToolConfig), STOCK_DATABASE_URL included.
// The defaults: the registry's database and address, 256 workers, inbox group
// 128 (group commit on: one WAL flush and a few statements commit many
// reservations; many workers let the groups fill, docs/performance.md).
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

// producer mounts the outbox's commands, relay, purge-outbox and replay-outbox,
// for the stock database, which holds stock's answers (package producerapp); the
// relay's health and metrics are on the registry's RelayAddr by default.
var producer = producerapp.Service{
	Name:          name,
	EnvPrefix:     service.EnvPrefix,
	DatabaseURL:   service.DatabaseURL,
	RelayHTTPAddr: registered.RelayAddr,
}
