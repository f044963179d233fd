package main

import (
	"log/slog"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/config"
	"example.com/shop/platform/consumerapp"
	"example.com/shop/platform/inbox"
	"example.com/shop/services/stock/internal/reservation"
	"example.com/shop/services/stock/migrations"
)

// spec describes the stock service to consumerapp.Run: consumer and variable prefix
// "stock" (STOCK_*), the queue stock.events, STOCK_DATABASE_URL defaulting to the
// stock database, HTTP_ADDR :8082, the reservation handlers and GET /reservations.
//
// The consumer defaults differ from consumerapp's: 32 workers (STOCK_WORKERS) and
// inbox group commit of up to 16 events in at most 2 transactions at once
// (STOCK_INBOX_GROUP, STOCK_INBOX_TX), so one WAL flush commits many reservations;
// see the benchmarks in internal/reservation.
func spec() consumerapp.Spec {
	return consumerapp.Spec{
		Name:        reservation.Consumer,
		Queue:       reservation.Queue(),
		Migrations:  migrations.FS,
		DatabaseURL: config.DefaultStockDatabaseURL,
		HTTPAddr:    config.DefaultStockHTTPAddr,
		Defaults:    consumerapp.Defaults{Workers: 32, InboxGroup: 16, InboxTx: 2},
		Register:    func(ib *inbox.Inbox, _ *slog.Logger) { reservation.Register(ib) },
		Routes: func(r chi.Router, pool *pgxpool.Pool, logger *slog.Logger) {
			reservation.Routes(r, pool, logger)
		},
	}
}
