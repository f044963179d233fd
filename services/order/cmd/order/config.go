package main

import (
	"example.com/shop/contracts"
	"example.com/shop/platform/consumerapp"
	"example.com/shop/platform/producerapp"
	"example.com/shop/services/order/internal/api"
	"example.com/shop/services/order/internal/events"
	"example.com/shop/services/order/migrations"
)

// name is the service's name: its binary, its inbox consumer (contracts.ConsumerOrder)
// and the service attribute of its log lines.
const name = events.Consumer

// registered is the service's entry in the registry (contracts/registry.go): its
// database, its ports and its variables' prefix are the defaults below.
var registered = contracts.MustService(name)

// service names order to the platform as a consumer of stock's answers and sets
// the defaults of its variables (docs/operations.md lists every variable; `order
// help <command>` prints what a command reads, with the defaults). Its consumer
// role, mounted by producer's serve, reads consumerapp.ConsumeConfig, whose own
// variables start with ORDER_ (ORDER_WORKERS, ORDER_PREFETCH, ORDER_INBOX_GROUP,
// ORDER_INBOX_TX, ORDER_MAX_ATTEMPTS, ORDER_RETRY_DELAYS); migrate, purge-inbox
// and dlq read consumerapp.ToolConfig. The defaults: the registry's database, 8
// workers, inbox group 1 (group commit off: stock's answers arrive at the pace
// of the orders placed).
var service = consumerapp.Service{
	Name:        name,
	EnvPrefix:   registered.EnvPrefix(),
	DatabaseURL: registered.LocalDatabaseURL(),
	Workers:     8,
	InboxGroup:  1,
	Schema:      migrations.Schema,
	Stale:       events.Stale,
}

// producer names order to the platform as a producer: serve, its API over the
// orders database on the registry's HTTPAddr, reads producerapp.ServeConfig
// (ORDER_DATABASE_URL, HTTP_ADDR, LOG_LEVEL, MIGRATE_ON_START, then the
// consumer's variables); the API needs only the database, so orders are taken
// into the outbox while the broker is away (docs/architecture.md rule 1), and
// /readyz does not fail with the broker. relay, purge-outbox and replay-outbox
// read producerapp.RelayConfig and ToolConfig; the relay's health and metrics are
// on the registry's RelayAddr by default. purge-outbox also purges the API's
// Idempotency-Keys, kept under their own consumer (api.IdempotencyConsumer),
// which purge-inbox never touches.
var producer = producerapp.Service{
	Name:                name,
	EnvPrefix:           service.EnvPrefix,
	DatabaseURL:         service.DatabaseURL,
	HTTPAddr:            registered.HTTPAddr,
	Schema:              service.Schema,
	RelayHTTPAddr:       registered.RelayAddr,
	IdempotencyConsumer: api.IdempotencyConsumer,
}
