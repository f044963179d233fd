package main

import (
	"log/slog"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/config"
	"example.com/shop/platform/consumerapp"
	"example.com/shop/services/shipping/internal/events"
	"example.com/shop/services/shipping/internal/httpapi"
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
		Name:        events.Consumer,
		Queue:       events.Queue(),
		Migrations:  migrations.FS,
		DatabaseURL: config.DefaultShippingDatabaseURL,
		HTTPAddr:    config.DefaultShippingHTTPAddr,
		Defaults:    consumerapp.Defaults{Workers: 8, InboxGroup: 1},
		Register:    events.Register,
		Routes: func(r chi.Router, pool *pgxpool.Pool, logger *slog.Logger) {
			httpapi.New(store.New(pool), logger).Routes(r)
		},
	}
}
