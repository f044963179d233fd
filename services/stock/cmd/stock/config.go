package main

import (
	"example.com/shop/platform/consumerapp"
	"example.com/shop/services/stock/internal/events"
)

// service names stock to the platform and sets the defaults of its variables
// (docs/operations.md lists every variable; `stock help <command>` prints what a
// command reads, with the defaults). serve reads consumerapp.ServeConfig, whose
// own variables start with STOCK_ (STOCK_DATABASE_URL, STOCK_WORKERS,
// STOCK_PREFETCH, STOCK_INBOX_GROUP, STOCK_INBOX_TX, STOCK_MAX_ATTEMPTS,
// STOCK_RETRY_DELAYS); migrate, purge-inbox and dlq read consumerapp.ToolConfig.
// The defaults: the local stock database, HTTP on :8082, 256 workers, inbox group
// 128 (group commit on: one WAL flush and a few statements commit many
// reservations; many workers let the groups fill, docs/performance.md).
var service = consumerapp.Service{
	Name:        name,
	EnvPrefix:   "STOCK_",
	DatabaseURL: "postgres://postgres@localhost:5432/stock?sslmode=disable",
	HTTPAddr:    ":8082",
	Workers:     256,
	InboxGroup:  128,
	Stale:       events.Stale,
}
