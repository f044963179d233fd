package producerapp

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/telemetry"
)

// ServeConfig is the configuration of `<name> serve` for a service that only
// produces, read from the environment by Service.LoadServeConfig:
//
//	<P>DATABASE_URL   PostgreSQL URL of the service's database (default Service.DatabaseURL)
//	HTTP_ADDR         HTTP listen address (default Service.HTTPAddr)
//	LOG_LEVEL         debug, info, warn or error (default info)
//	MIGRATE_ON_START  apply Service.Schema before serving (default false)
type ServeConfig struct {
	DatabaseURL    string
	HTTPAddr       string
	LogLevel       slog.Level
	MigrateOnStart bool
}

// LoadServeConfig reads ServeConfig through env; env.Err names every bad variable.
func (s Service) LoadServeConfig(env *config.Env) ServeConfig {
	return ServeConfig{
		DatabaseURL:    pg.URLFromEnv(env, s.EnvPrefix+"DATABASE_URL", s.DatabaseURL),
		HTTPAddr:       env.String("HTTP_ADDR", s.HTTPAddr),
		LogLevel:       logging.LevelFromEnv(env),
		MigrateOnStart: env.Bool("MIGRATE_ON_START", false),
	}
}

// LogValue logs the configuration with the password masked.
func (c ServeConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("database_url", config.MaskURL(c.DatabaseURL)),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("log_level", c.LogLevel.String()),
		slog.Bool("migrate_on_start", c.MigrateOnStart),
	)
}

// ServeCommand is `<name> serve` for a service that only produces: its HTTP API
// over its database, whose handlers write their changes and the events about
// them in one transaction (docs/architecture.md, rule 1), for `<name> relay` to
// publish. It needs no broker. A service that consumes too mounts
// consumerapp's serve instead, which also serves its routes.
func (s Service) ServeCommand(getenv func(string) string, stderr io.Writer, routes httpx.Routes) cli.Command {
	return cli.Command{
		Name:    "serve",
		Summary: "serve the HTTP API (HTTP_ADDR), writing events to the outbox",
		Env:     func(env *config.Env) { s.LoadServeConfig(env) },
		Run: func(ctx context.Context, _ []string) error {
			return s.serve(ctx, getenv, stderr, routes)
		},
	}
}

// MigrateCommand is `<name> migrate` (migrate.Command) with Service.Schema.
func (s Service) MigrateCommand(getenv func(string) string, stderr io.Writer) cli.Command {
	return migrate.Command(s.Name, s.EnvPrefix, s.DatabaseURL, s.Schema, getenv, stderr)
}

// serve reads top to bottom: configuration, logger and tracing; the HTTP server,
// listening first and answering /healthz, /metrics and /readyz (503 until the
// routes serve) and a 503 problem on every other path; with MIGRATE_ON_START,
// Service.Schema applied, retried while the server does not answer (pg.Retry);
// the database, waited for with pg.WaitPool (its outbox table created by
// `<name> migrate`); then the routes, served until ctx ends and the server has
// shut down within httpx.ShutdownTimeout. /readyz checks "postgres" (ping). It
// returns nil after a clean shutdown, also when ctx ends while it still waits
// for the database.
func (s Service) serve(ctx context.Context, getenv func(string) string, stderr io.Writer, routes httpx.Routes) error {
	cfg, err := config.Load(getenv, s.LoadServeConfig)
	if err != nil {
		return err
	}
	logger, stopTracing, err := telemetry.StartProcess(ctx, stderr, cfg.LogLevel, s.Name, "starting", cfg)
	if err != nil {
		return err
	}
	defer stopTracing()

	var db atomic.Pointer[pgxpool.Pool]
	defer func() { pg.Close(db.Load()) }()
	reg := metrics.NewRegistry()
	checks := []httpx.Check{httpx.Pending("postgres", &db, (*pgxpool.Pool).Ping)}
	srv, err := httpx.Listen(ctx, cfg.HTTPAddr, logger, reg, "starting: not connected to its database yet", checks...)
	if err != nil {
		return err
	}
	err = srv.Run(ctx, func(ctx context.Context) (func(context.Context) error, error) {
		if cfg.MigrateOnStart {
			if err := migrate.OnStart(ctx, cfg.DatabaseURL, s.Schema, logger); err != nil {
				return nil, err
			}
		}
		pool, err := pg.WaitPool(ctx, cfg.DatabaseURL, logger, pg.CreatedBy(s.Name+" migrate"), pg.RequireTables("outbox"))
		if err != nil {
			return nil, err
		}
		db.Store(pool)
		srv.Ready(routes(pool, logger, reg, checks))
		logger.InfoContext(ctx, "connected", slog.String("database", config.MaskURL(cfg.DatabaseURL)))
		return nil, nil
	})
	logger.InfoContext(ctx, "stopped", slog.Any("error", err))
	return err
}
