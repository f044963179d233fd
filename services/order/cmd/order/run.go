package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/config"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
	"example.com/shop/services/order/internal/api"
	"example.com/shop/services/order/internal/store"
	"example.com/shop/services/order/migrations"
)

const usage = "usage: order serve | relay | migrate | purge-outbox --older-than DURATION | replay-outbox --since T --until T [--event-name N] [--dry-run] [--force]"

// Each process of the order service names itself in the service attribute of its
// log lines; a one-shot command is named after its subcommand.
const (
	serviceAPI     = "order-api"
	serviceRelay   = "order-relay"
	serviceMigrate = "order-migrate"
	servicePurge   = "order-purge-outbox"
)

// migrateCommand creates the order database and its tables; serve and relay name it
// while they wait for them.
const migrateCommand = "order migrate"

// run is the whole program: args are os.Args, getenv reads the environment,
// command output goes to stdout and JSON logs to stderr. It returns when the
// command is done or, for serve, once ctx ends and the server has shut down.
// Each subcommand reads its own configuration and gets the arguments after
// its name.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		return errors.New(usage)
	}
	switch cmd, rest := args[1], args[2:]; cmd {
	case "serve":
		return runServe(ctx, rest, getenv, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, rest, getenv, stdout, stderr)
	case "relay":
		return runRelay(ctx, rest, getenv, stdout, stderr)
	case "purge-outbox":
		return runPurgeOutbox(ctx, rest, getenv, stdout, stderr)
	case "replay-outbox":
		return runReplayOutbox(ctx, rest, getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q; %s", cmd, usage)
	}
}

func noArgs(cmd string, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s: unexpected argument %q; %s", cmd, args[0], usage)
	}
	return nil
}

// runServe serves the order API until ctx ends: config, logger, then the
// listener, answering /healthz, /metrics and /readyz (503 until the database
// is connected) and a 503 problem on every other path; then the optional
// migrations, retried while the server does not answer (pg.Retry); the
// database pool, waited for with pg.WaitPool; and the order routes. ctx's end
// starts a graceful shutdown bounded by httpx.ShutdownTimeout (10 s); it
// returns nil after a clean one, also when ctx ends while it still waits for
// the database.
func runServe(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	if err := noArgs("serve", args); err != nil {
		return err
	}
	cfg, err := loadServeConfig(getenv)
	if err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, serviceAPI)
	logger.InfoContext(ctx, "starting", slog.Any("config", cfg))

	validator, err := contracts.NewValidator()
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	var pool atomic.Pointer[pgxpool.Pool]
	defer func() {
		if p := pool.Load(); p != nil {
			p.Close()
		}
	}()
	check := httpx.Pending("postgres", &pool, (*pgxpool.Pool).Ping)
	// Serve health, readiness and metrics while the database is awaited; the
	// order routes join once it is connected.
	handler := httpx.NewSwitch(httpx.StartingRouter(logger, reg, "starting: not connected to the database yet", check))

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- httpx.ServeListener(ctx, ln, handler, logger)
		cancel() // a server failure stops the start-up too
	}()
	logger.InfoContext(ctx, "order service listening", slog.String("addr", ln.Addr().String()))

	err = func() error {
		if cfg.MigrateOnStart {
			if err := pg.Retry(ctx, cfg.DatabaseURL, logger, func(ctx context.Context) error {
				return migrate.Apply(ctx, cfg.DatabaseURL, migrations.FS, logger)
			}); err != nil {
				return err
			}
		}
		p, err := pg.WaitPool(ctx, cfg.DatabaseURL, logger,
			pg.CreatedBy(migrateCommand), pg.RequireTables("orders", "outbox", "processed_event"))
		if err != nil {
			return err
		}
		pool.Store(p)
		st := store.New(p, outbox.NewWriter(validator, contracts.ProducerOrder))
		router := httpx.NewRouter(logger, reg, check)
		api.New(st, logger, reg).Routes(router)
		handler.Set(router)
		logger.InfoContext(ctx, "order service ready", slog.String("database", config.MaskURL(cfg.DatabaseURL)))
		return nil
	}()
	if err != nil && ctx.Err() != nil {
		err = nil // stopped while starting: a clean shutdown, unless HTTP failed
	}
	if err != nil {
		cancel()
	}
	err = errors.Join(err, <-served)
	logger.InfoContext(ctx, "stopped", slog.Any("error", err))
	return err
}

// runMigrate creates the order database when it is missing and applies the
// embedded migrations, logging each one and the outcome as JSON on stderr
// (migrate.Apply); running it again applies nothing.
func runMigrate(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	if err := noArgs("migrate", args); err != nil {
		return err
	}
	cfg, err := loadMigrateConfig(getenv)
	if err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, serviceMigrate)
	logger.InfoContext(ctx, "migrating", slog.Any("config", cfg))
	return migrate.Apply(ctx, cfg.DatabaseURL, migrations.FS, logger)
}
