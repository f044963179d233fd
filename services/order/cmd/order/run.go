package main

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/producerapp"
	"example.com/shop/platform/telemetry"
	"example.com/shop/services/order/internal/api"
	"example.com/shop/services/order/internal/store"
	"example.com/shop/services/order/migrations"
)

// Each process of the order service names itself in the service attribute of its
// log lines; a one-shot command is named after its subcommand (the producer's
// commands: order-relay, order-purge-outbox, order-replay-outbox).
const (
	serviceAPI     = "order-api"
	serviceMigrate = "order-migrate"
)

// service is the binary's name, and migrateCommand the command that creates the
// order database and its tables; serve and relay name it while they wait for them.
const (
	service        = "order"
	migrateCommand = service + " migrate"
)

// producer mounts the outbox's commands, relay, purge-outbox and
// replay-outbox, for the order database (package producerapp).
var producer = producerapp.Service{
	Name:                service,
	EnvPrefix:           "ORDER_",
	DatabaseURL:         defaultDatabaseURL,
	RelayHTTPAddr:       defaultRelayHTTPAddr,
	IdempotencyConsumer: api.IdempotencyConsumer,
}

// run is the whole program: args are os.Args, getenv reads the environment,
// command output goes to stdout and JSON logs to stderr. It returns when the
// command is done or, for serve and relay, once ctx ends and everything has
// shut down; a *cli.UsageError for a command line that cannot run. Each
// subcommand reads its own configuration (config.go, package producerapp).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	serve := cli.Command{
		Name:    "serve",
		Summary: "serve the order API on HTTP_ADDR with /healthz, /readyz and /metrics",
		Env:     func(env *config.Env) { loadServeConfig(env) },
		Run:     func(ctx context.Context, _ []string) error { return runServe(ctx, getenv, stderr) },
	}
	migrate := cli.Command{
		Name:    "migrate",
		Summary: "create the order database if missing and apply the embedded migrations",
		Env:     func(env *config.Env) { loadMigrateConfig(env) },
		Run:     func(ctx context.Context, _ []string) error { return runMigrate(ctx, getenv, stderr) },
	}
	return cli.Program{
		Name:    service,
		Summary: "the order service: orders over HTTP, their events through the outbox and its relay",
		Commands: []cli.Command{serve, producer.RelayCommand(getenv, stderr), migrate,
			producer.PurgeOutboxCommand(getenv, stdout, stderr), producer.ReplayOutboxCommand(getenv, stdout, stderr)},
	}.Run(ctx, args, stdout)
}

// runServe serves the order API until ctx ends: config, logger, then the
// listener (httpx.Listen), answering /healthz, /metrics and /readyz (503 until the
// database is connected) and a 503 problem on every other path; then the optional
// migrations, retried while the server does not answer (pg.Retry); the
// database pool, waited for with pg.WaitPool; and the order routes. ctx's end
// starts a graceful shutdown bounded by httpx.ShutdownTimeout (10 s); it
// returns nil after a clean one, also when ctx ends while it still waits for
// the database.
func runServe(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.Load(getenv, loadServeConfig)
	if err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, serviceAPI)
	stopTracing, err := telemetry.Start(ctx, serviceAPI, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	logger.InfoContext(ctx, "starting", slog.Any("config", cfg))

	validator, err := contracts.NewValidator()
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	var pool atomic.Pointer[pgxpool.Pool]
	defer func() { pg.Close(pool.Load()) }()
	check := httpx.Pending("postgres", &pool, (*pgxpool.Pool).Ping)
	// Serve health, readiness and metrics while the database is awaited; the
	// order routes join once it is connected.
	srv, err := httpx.Listen(ctx, cfg.HTTPAddr, logger, reg, "starting: not connected to the database yet", check)
	if err != nil {
		return err
	}
	err = srv.Run(ctx, func(ctx context.Context) (func(context.Context) error, error) {
		if cfg.MigrateOnStart {
			if err := pg.Retry(ctx, cfg.DatabaseURL, logger, func(ctx context.Context) error {
				return migrate.Apply(ctx, cfg.DatabaseURL, migrations.Schema, logger)
			}); err != nil {
				return nil, err
			}
		}
		p, err := pg.WaitPool(ctx, cfg.DatabaseURL, logger,
			pg.CreatedBy(migrateCommand), pg.RequireTables("orders", "outbox", "processed_event"))
		if err != nil {
			return nil, err
		}
		pool.Store(p)
		st := store.New(p, outbox.NewWriter(validator, contracts.ProducerOrder))
		router := httpx.NewRouter(logger, reg, check)
		api.New(st, logger, reg).Routes(router)
		srv.Ready(router)
		logger.InfoContext(ctx, "order service ready", slog.String("database", config.MaskURL(cfg.DatabaseURL)))
		return nil, nil // serve until ctx ends
	})
	logger.InfoContext(ctx, "stopped", slog.Any("error", err))
	return err
}

// runMigrate creates the order database when it is missing and applies the
// embedded migrations, logging each one and the outcome as JSON on stderr
// (migrate.Apply); running it again applies nothing.
func runMigrate(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.Load(getenv, loadMigrateConfig)
	if err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, serviceMigrate)
	logger.InfoContext(ctx, "migrating", slog.Any("config", cfg))
	return migrate.Apply(ctx, cfg.DatabaseURL, migrations.Schema, logger)
}
