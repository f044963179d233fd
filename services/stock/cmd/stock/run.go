package main

import (
	"context"
	"io"
	"log/slog"

	"example.com/shop/contracts"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/telemetry"
	"example.com/shop/services/stock/internal/api"
	"example.com/shop/services/stock/internal/events"
	"example.com/shop/services/stock/internal/store"
	"example.com/shop/services/stock/migrations"
)

// name is the service's name: its binary, its inbox consumer (contracts.ConsumerStock)
// and the service attribute of its log lines.
const name = events.Consumer

// run is the whole program: args are os.Args, getenv reads the environment, command
// output goes to stdout and JSON logs to stderr. It returns when the command is done
// or, for serve, once ctx ends and everything has shut down; a *cli.UsageError for a
// command line that cannot run. migrate, purge-inbox and dlq are the platform's
// (package consumerapp), named after stock.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return cli.Program{
		Name:    name,
		Summary: "reserves stock for placed orders from the order events on " + contracts.QueueStock,
		Commands: []cli.Command{{
			Name:    "serve",
			Summary: "serve the HTTP API (HTTP_ADDR) and consume " + contracts.QueueStock,
			Env:     func(env *config.Env) { service.LoadServeConfig(env) },
			Run: func(ctx context.Context, _ []string) error {
				return runServe(ctx, getenv, stderr)
			},
		},
			service.MigrateCommand(migrations.FS, getenv, stderr),
			service.PurgeInboxCommand(getenv, stdout),
			service.DLQCommand(getenv, stdout, stderr),
		},
	}.Run(ctx, args, stdout)
}

// runServe runs the HTTP API and the consumer of stock.events until ctx ends or one of
// them fails, then stops both. It reads top to bottom: configuration and logger; the
// HTTP server, listening first and answering /healthz, /metrics and /readyz (503 until
// PostgreSQL and the broker are connected) and a 503 problem on every other path; the
// database, waited for with pg.WaitPool, and the broker, dialled twice with backoff
// (one connection consumes, the other publishes retry copies, so that a broker
// blocking publishers never stalls the acks), each declaring stock's topology
// (consumerapp.Deps.Connect); the inbox with the stock handlers (docs/architecture.md
// rule 3); the consumer (consumerapp.Deps.Consume); the stock routes.
//
// /readyz checks "postgres" (ping), "rabbitmq" and "rabbitmq_retry" (connected and
// not blocked) and "consumer" (subscribed, not paused). While the database or the
// retry path is unavailable the consumer pauses and resumes once both answer.
//
// It returns nil after a clean shutdown, also when ctx ends while it still waits for a
// dependency.
func runServe(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.Load(getenv, service.LoadServeConfig)
	if err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, name)
	stopTracing, err := telemetry.Start(ctx, name, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	logger.InfoContext(ctx, "starting", slog.Any("config", cfg))
	deps, err := service.NewDeps(cfg)
	if err != nil {
		return err
	}
	defer deps.Close()
	validator, err := contracts.NewValidator()
	if err != nil {
		return err
	}

	reg := metrics.NewRegistry()
	checks := deps.Checks()
	srv, err := httpx.Listen(ctx, cfg.HTTPAddr, logger, reg, "starting: not connected to its dependencies yet", checks...)
	if err != nil {
		return err
	}
	err = srv.Run(ctx, func(ctx context.Context) (func(context.Context) error, error) {
		pool, err := deps.Connect(ctx, logger, reg)
		if err != nil {
			return nil, err
		}
		ib := inbox.New(pool, events.Consumer, validator, logger, reg, inbox.WithGroupCommit(cfg.InboxGroup, cfg.InboxTx))
		events.Register(ib, outbox.NewWriter(validator, contracts.ProducerStock), logger)
		if err := deps.Consume(ib, logger, reg); err != nil {
			return nil, err
		}
		srv.Ready(api.NewHandler(api.New(store.New(pool), logger), logger, reg, checks...))
		logger.InfoContext(ctx, "connected", slog.String("database", config.MaskURL(cfg.DatabaseURL)),
			slog.String("amqp", config.MaskURL(cfg.AMQPURL)))
		return deps.Run, nil // consume until ctx ends
	})
	logger.InfoContext(ctx, "stopped", slog.Any("error", err))
	return err
}
