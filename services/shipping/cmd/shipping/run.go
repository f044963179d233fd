package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/httpx"
	"example.com/shop/services/shipping/internal/api"
	"example.com/shop/services/shipping/internal/events"
	"example.com/shop/services/shipping/internal/store"
)

// name is the service's name: its binary, its inbox consumer (contracts.ConsumerShipping)
// and the service attribute of its log lines.
const name = events.Consumer

// run is the whole program: args are os.Args, getenv reads the environment, command
// output goes to stdout and JSON logs to stderr. It returns when the command is done
// or, for serve, once ctx ends and everything has shut down; a *cli.UsageError for a
// command line that cannot run. The commands are the platform's (package
// consumerapp), named after shipping; serve runs shipping's own event handlers
// (events.Register) and routes.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return cli.Program{
		Name:     name,
		Summary:  "keeps each order's status and shipment from the order events on " + contracts.QueueShipping,
		Commands: service.Commands(getenv, stdout, stderr, events.Register, routes),
	}.Run(ctx, args, stdout)
}

// routes is shipping's HTTP API over pool (api.NewHandler).
func routes(pool *pgxpool.Pool, logger *slog.Logger, reg *prometheus.Registry, checks []httpx.Check) http.Handler {
	return api.NewHandler(api.New(store.New(pool), logger), logger, reg, checks...)
}
