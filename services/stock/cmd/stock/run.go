package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/platform/consumerapp"
	"example.com/shop/services/stock/internal/api"
	"example.com/shop/services/stock/internal/events"
	"example.com/shop/services/stock/internal/store"
	"example.com/shop/services/stock/migrations"
)

// spec describes the stock service to consumerapp.Run: consumer and variable prefix
// "stock" (STOCK_*), the queue stock.events, STOCK_DATABASE_URL defaulting to the
// stock database, HTTP_ADDR :8082, the reservation handlers and GET /reservations.
//
// The consumer defaults differ from consumerapp's: 32 workers (STOCK_WORKERS) and
// inbox group commit of up to 16 events in at most 2 transactions at once
// (STOCK_INBOX_GROUP, STOCK_INBOX_TX), so one WAL flush commits many reservations;
// see the benchmarks in internal/events.
func spec() consumerapp.Spec {
	return consumerapp.Spec{
		Name: events.Consumer,
		Queue: amqp.QueueSpec{
			Name:            contracts.QueueStock,
			DeadLetterQueue: contracts.QueueStockDLQ,
			RoutingKeys:     []string{contracts.EventOrderPlaced, contracts.EventOrderCancelled},
		},
		Migrations:  migrations.FS,
		DatabaseURL: config.DefaultStockDatabaseURL,
		HTTPAddr:    config.DefaultStockHTTPAddr,
		Defaults:    consumerapp.Defaults{Workers: 32, InboxGroup: 16, InboxTx: 2},
		Register:    events.Register,
		Routes: func(r chi.Router, pool *pgxpool.Pool, logger *slog.Logger) {
			api.New(store.New(pool), logger).Routes(r)
		},
	}
}

// run is the whole program: args are os.Args, getenv reads the environment, command
// output goes to stdout and JSON logs to stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return consumerapp.Run(ctx, spec(), args, getenv, stdout, stderr)
}
