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
	"example.com/shop/services/order/internal/api"
	"example.com/shop/services/order/internal/events"
	"example.com/shop/services/order/internal/store"
)

// run is the whole program: args are os.Args, getenv reads the environment, command
// output goes to stdout and JSON logs to stderr. It returns when the command is done
// or, for serve and relay, once ctx ends and everything has shut down; a
// *cli.UsageError for a command line that cannot run. The commands are the
// platform's (package producerapp for the producer, consumerapp for the consumer),
// named after order; serve runs order's API (producerapp) with its consumer of
// stock's answers behind it (consumerapp, events.Register), both writing order's
// events to its outbox.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	validator, err := contracts.NewValidator()
	if err != nil {
		return err
	}
	w := outbox.NewWriter(validator, contracts.ProducerOrder)
	handlers := func(ib *inbox.Inbox, logger *slog.Logger) {
		events.Register(ib, store.UpdateInTx(w), logger, nil)
	}
	routes := func(pool *pgxpool.Pool, logger *slog.Logger, reg *prometheus.Registry, checks []httpx.Check) http.Handler {
		router := httpx.NewRouter(logger, reg, checks...)
		api.New(store.New(pool, w), logger, reg).Routes(router)
		return router
	}
	commands := append([]cli.Command{producer.ServeCommand(getenv, stderr, routes, service.Consumer(handlers))},
		service.Tools(getenv, stdout, stderr)...)
	return cli.Program{
		Name: name,
		Summary: "the order service: orders over HTTP, stock's answers from " + contracts.QueueOrder +
			", their events through the outbox and its relay",
		Commands: append(commands, producer.Commands(getenv, stdout, stderr)...),
	}.Run(ctx, args, stdout)
}
