package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
)

// relayConfig is the configuration of `order relay`, read from the environment:
//
//	ORDER_DATABASE_URL     PostgreSQL URL of the order database (default postgres://postgres@localhost:5432/orders?sslmode=disable)
//	AMQP_URL               RabbitMQ URL (default amqp://guest:guest@localhost:5672/)
//	HTTP_ADDR              address of /healthz, /readyz and /metrics (default :8084)
//	RELAY_BATCH_SIZE       rows per batch (default 500)
//	RELAY_POLL_INTERVAL    wait without NOTIFY before looking anyway, and after a failed batch (default 1s)
//	RELAY_CONFIRM_TIMEOUT  bound on publishing one batch, confirms included (default 5s)
//	RELAY_MODE             pipelined (default) or one-at-a-time
//	RELAY_DECLARE_QUEUES   also declare the consumers' queues (default true); false declares
//	                       only the exchanges and the unroutable queue, for a broker user that
//	                       may not read the consumers' queues (deploy/rabbitmq/definitions.json)
//	LOG_LEVEL              debug, info, warn or error (default info)
type relayConfig struct {
	DatabaseURL string
	AMQPURL     string
	HTTPAddr    string
	LogLevel    slog.Level
	Relay       outbox.RelayConfig
	// DeclareQueues: declare amqp.DefaultTopology's queues, not only its exchanges.
	DeclareQueues bool
}

// loadRelayConfig reads relayConfig through getenv. The error names every bad variable.
func loadRelayConfig(getenv func(string) string) (relayConfig, error) {
	env := config.NewEnv(getenv)
	c := relayConfig{
		DatabaseURL: env.String("ORDER_DATABASE_URL", config.DefaultOrderDatabaseURL),
		AMQPURL:     env.String("AMQP_URL", config.DefaultAMQPURL),
		HTTPAddr:    env.String("HTTP_ADDR", config.DefaultRelayHTTPAddr),
		LogLevel:    logLevel(env),
		// Declaring a queue with a dead-letter exchange needs the right to read it.
		DeclareQueues: env.Bool("RELAY_DECLARE_QUEUES", true),
		Relay: outbox.RelayConfig{
			BatchSize:      env.PositiveInt("RELAY_BATCH_SIZE", outbox.DefaultBatchSize),
			PollInterval:   env.PositiveDuration("RELAY_POLL_INTERVAL", outbox.DefaultPollInterval),
			ConfirmTimeout: env.PositiveDuration("RELAY_CONFIRM_TIMEOUT", outbox.DefaultConfirmTimeout),
		},
	}
	rawMode := env.String("RELAY_MODE", outbox.Pipelined.String())
	mode, err := outbox.ParseMode(rawMode)
	if err != nil {
		env.Errorf("RELAY_MODE", "%q is not one of pipelined, one-at-a-time", rawMode)
	}
	c.Relay.Mode = mode
	return c, env.Err()
}

// LogValue logs the configuration with the passwords masked.
func (c relayConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("database_url", config.MaskURL(c.DatabaseURL)),
		slog.String("amqp_url", config.MaskURL(c.AMQPURL)),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("log_level", c.LogLevel.String()),
		slog.Int("batch_size", c.Relay.BatchSize),
		slog.Duration("poll_interval", c.Relay.PollInterval),
		slog.Duration("confirm_timeout", c.Relay.ConfirmTimeout),
		slog.String("mode", c.Relay.Mode.String()),
	)
}

// runRelay runs the outbox relay (DESIGN.md rule 2) until ctx ends: config,
// logger, HTTP server (/healthz, /readyz, /metrics), database pool (waited
// for with pg.WaitPool), broker connection (dialled with backoff; it declares
// the topology), then the relay, which leads or stands by behind the advisory
// lock. /readyz checks PostgreSQL and the broker connection and answers 503
// until both are connected; a standby relay is ready too (relay_leader tells
// them apart). On ctx's end the batch in hand is finished or rolled back, then
// the HTTP server shuts down within httpx.ShutdownTimeout; ctx's end while it
// still waits for a dependency is a clean shutdown too (nil).
func runRelay(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	if err := noArgs("relay", args); err != nil {
		return err
	}
	cfg, err := loadRelayConfig(getenv)
	if err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, service)
	logger.InfoContext(ctx, "starting relay", slog.Any("config", cfg))

	// Serve health and metrics while the database and the broker are awaited.
	var (
		db     atomic.Pointer[pgxpool.Pool]
		broker atomic.Pointer[amqp.Connection]
	)
	reg := metrics.NewRegistry()
	router := httpx.NewRouter(logger, reg,
		httpx.Pending("postgres", &db, (*pgxpool.Pool).Ping),
		httpx.Pending("rabbitmq", &broker, func(c *amqp.Connection, _ context.Context) error { return c.Ready() }),
	)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- httpx.ServeListener(ctx, ln, router, logger)
		cancel() // a server failure stops the relay too
	}()
	logger.InfoContext(ctx, "relay listening", slog.String("addr", ln.Addr().String()))

	relayErr := func() error {
		pool, err := pg.WaitPool(ctx, cfg.DatabaseURL, logger)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		defer pool.Close()
		db.Store(pool)

		topo := amqp.DefaultTopology()
		if !cfg.DeclareQueues {
			topo.Queues = nil
		}
		conn, err := amqp.Dial(ctx, cfg.AMQPURL, topo, logger)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		defer func() { _ = conn.Close() }()
		broker.Store(conn)
		pub := amqp.NewPublisher(conn, topo.Exchange)
		defer func() { _ = pub.Close() }()

		relay, err := outbox.NewRelay(pool, pub, cfg.Relay, logger, reg)
		if err != nil {
			return err
		}
		return relay.Run(ctx)
	}()
	cancel()
	err = errors.Join(relayErr, <-served)
	logger.InfoContext(ctx, "relay stopped", slog.Any("error", err))
	return err
}

// purgeConfig is the configuration of `order purge-outbox`: ORDER_DATABASE_URL
// and LOG_LEVEL, as for serve.
type purgeConfig struct {
	DatabaseURL string
	LogLevel    slog.Level
}

// runPurgeOutbox deletes the outbox rows published longer ago than the
// horizon given by --older-than (a Go duration such as 168h, required,
// > 0) and prints how many it deleted (DESIGN.md rule 5). Unpublished rows
// are never deleted.
func runPurgeOutbox(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("purge-outbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	olderThan := fs.Duration("older-than", 0, "delete rows published longer ago than this `duration` (for example 168h); required")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("purge-outbox: %w", err)
	}
	if err := noArgs("purge-outbox", fs.Args()); err != nil {
		return err
	}
	if *olderThan <= 0 {
		return fmt.Errorf("purge-outbox: --older-than must be a positive duration such as 168h, got %v", *olderThan)
	}
	env := config.NewEnv(getenv)
	cfg := purgeConfig{
		DatabaseURL: env.String("ORDER_DATABASE_URL", config.DefaultOrderDatabaseURL),
		LogLevel:    logLevel(env),
	}
	if err := env.Err(); err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, service)

	pool, err := pg.NewPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	start := time.Now()
	n, err := outbox.Purge(ctx, pool, *olderThan)
	logger.InfoContext(ctx, "outbox purged", slog.Int64("rows", n), slog.Duration("older_than", *olderThan),
		slog.Duration("took", time.Since(start)), slog.Any("error", err))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "purged %d outbox rows published more than %v ago\n", n, *olderThan)
	return nil
}
