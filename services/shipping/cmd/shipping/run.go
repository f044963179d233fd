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
	"example.com/shop/services/shipping/internal/api"
	"example.com/shop/services/shipping/internal/events"
	"example.com/shop/services/shipping/internal/store"
	"example.com/shop/services/shipping/migrations"
)

// spec describes the shipping service to consumerapp.Run: consumer and variable
// prefix "shipping" (SHIPPING_*), the queue shipping.events, SHIPPING_DATABASE_URL
// defaulting to the shipping database, HTTP_ADDR :8083, the order status handlers
// (docs/architecture.md, rule 4) and GET /order-status/{order_id}, GET /shipments/{order_id}.
//
// The consumer defaults are consumerapp's: 8 workers (SHIPPING_WORKERS) and one
// inbox transaction per event (SHIPPING_INBOX_GROUP 1, group commit off; set it
// above 1 to share transactions as stock does).
func spec() consumerapp.Spec {
	return consumerapp.Spec{
		Name: events.Consumer,
		Queue: amqp.QueueSpec{
			Name:            contracts.QueueShipping,
			DeadLetterQueue: contracts.QueueShippingDLQ,
			RoutingKeys:     []string{contracts.EventOrderPlaced, contracts.EventOrderCancelled},
		},
		Migrations:  migrations.FS,
		DatabaseURL: config.DefaultShippingDatabaseURL,
		HTTPAddr:    config.DefaultShippingHTTPAddr,
		Defaults:    consumerapp.Defaults{Workers: 8, InboxGroup: 1},
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
