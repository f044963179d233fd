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
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/stock/internal/api"
	"example.com/shop/services/stock/internal/events"
	"example.com/shop/services/stock/internal/store"
)

// name is the service's name: its binary, its inbox consumer (contracts.ConsumerStock)
// and the service attribute of its log lines.
const name = events.Consumer

// run is the whole program: args are os.Args, getenv reads the environment, command
// output goes to stdout and JSON logs to stderr. It returns when the command is done
// or, for serve, once ctx ends and everything has shut down; a *cli.UsageError for a
// command line that cannot run. The commands are the platform's (package
// consumerapp for the consumer, producerapp for the producer), named after stock;
// serve runs stock's own event handlers
// (events.Register, writing stock's answers to its outbox) and routes.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	validator, err := contracts.NewValidator()
	if err != nil {
		return err
	}
	answers := outbox.NewWriter(validator, contracts.ProducerStock)
	handlers := func(ib *inbox.Inbox, logger *slog.Logger) { events.Register(ib, answers, logger) }
	commands := service.Commands(getenv, stdout, stderr, handlers, routes)
	return cli.Program{
		Name: name,
		Summary: "reserves stock for placed orders from the order events on " + contracts.QueueStock +
			", and publishes its answers through its outbox and relay",
		Commands: append(commands, producer.Commands(getenv, stdout, stderr)...),
	}.Run(ctx, args, stdout)
}

// routes is stock's HTTP API over pool (api.NewHandler).
func routes(pool *pgxpool.Pool, logger *slog.Logger, reg *prometheus.Registry, checks []httpx.Check) http.Handler {
	return api.NewHandler(api.New(store.New(pool), logger), logger, reg, checks...)
}
