package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/dlq"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
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
// command line that cannot run.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var olderThan time.Duration
	return cli.Program{
		Name:    name,
		Summary: "reserves stock for placed orders from the order events on " + contracts.QueueStock,
		Commands: []cli.Command{{
			Name:    "serve",
			Summary: "serve the HTTP API (HTTP_ADDR) and consume " + contracts.QueueStock,
			Env:     func(env *config.Env) { loadServeConfig(env) },
			Run: func(ctx context.Context, _ []string) error {
				return runServe(ctx, getenv, stderr)
			},
		}, {
			Name:    "migrate",
			Summary: "create the stock database if missing and apply the embedded migrations",
			Env:     func(env *config.Env) { loadMigrateConfig(env) },
			Run: func(ctx context.Context, _ []string) error {
				return runMigrate(ctx, getenv, stderr)
			},
		}, {
			Name:    "purge-inbox",
			Summary: "delete processed_event keys older than --older-than (at least INBOX_MIN_RETENTION)",
			Flags: func(fs *flag.FlagSet) {
				fs.DurationVar(&olderThan, "older-than", 0, "delete keys processed longer ago than this `duration` (e.g. 720h); required")
			},
			Env: func(env *config.Env) { loadPurgeConfig(env) },
			Run: func(ctx context.Context, _ []string) error {
				return runPurgeInbox(ctx, getenv, olderThan, stdout)
			},
		}, {
			Name:    "dlq",
			Args:    "list|show|replay|drop ...",
			Summary: "read, replay or drop the messages of " + contracts.QueueStockDLQ,
			Help:    "subcommands: " + dlq.Usage,
			Env:     func(env *config.Env) { loadDLQConfig(env) },
			Raw:     true,
			Run: func(ctx context.Context, args []string) error {
				return runDLQ(ctx, getenv, args, stdout, stderr)
			},
		}},
	}.Run(ctx, args, stdout)
}

// load reads a command's configuration through getenv with load; the error names
// every variable that cannot be used.
func load[T any](getenv func(string) string, load func(*config.Env) T) (T, error) {
	env := config.NewEnv(getenv)
	c := load(env)
	return c, env.Err()
}

// runServe runs the HTTP API and the consumer of stock.events until ctx ends or one of
// them fails, then stops both. It reads top to bottom: configuration and logger; the
// HTTP server, listening first and answering /healthz, /metrics and /readyz (503 until
// PostgreSQL and the broker are connected) and a 503 problem on every other path; the
// database, waited for with pg.WaitPool; the broker, dialled twice with backoff (one
// connection consumes, the other publishes retry copies, so that a broker blocking
// publishers never stalls the acks), each declaring stock's topology; the inbox with
// the stock handlers (docs/architecture.md rule 3); the consumer; the stock routes.
//
// /readyz checks "postgres" (ping), "rabbitmq" and "rabbitmq_retry" (connected and
// not blocked) and "consumer" (subscribed, not paused). While the database or the
// retry path is unavailable the consumer pauses and resumes once both answer.
//
// It returns nil after a clean shutdown, also when ctx ends while it still waits for a
// dependency.
func runServe(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := load(getenv, loadServeConfig)
	if err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, name)
	stopTracing, err := telemetry.Setup(ctx, name)
	if err != nil {
		return err
	}
	defer func() {
		if err := stopTracing(ctx); err != nil {
			logger.WarnContext(ctx, "tracing: spans not flushed", slog.Any("error", err))
		}
	}()
	logger.InfoContext(ctx, "starting", slog.Any("config", cfg))
	consumer, ok := contracts.ConsumerNamed(contracts.ConsumerStock)
	if !ok {
		return errors.New("the contract has no consumer " + contracts.ConsumerStock)
	}
	queue := amqp.ConsumerQueue(consumer, cfg.RetryDelays)
	topology := amqp.EventTopology(queue)
	validator, err := contracts.NewValidator()
	if err != nil {
		return err
	}

	reg := metrics.NewRegistry()
	var (
		pool     atomic.Pointer[pgxpool.Pool]
		broker   atomic.Pointer[amqp.Connection]
		retry    atomic.Pointer[amqp.Connection]
		consumed atomic.Pointer[amqp.Consumer]
	)
	defer func() {
		// Both at once: stopped within one CloseTimeout whatever the broker does.
		_ = amqp.CloseAll(retry.Load(), broker.Load())
		if p := pool.Load(); p != nil {
			p.Close()
		}
	}()
	brokerReady := func(c *amqp.Connection, _ context.Context) error { return c.Ready() }
	checks := []httpx.Check{
		httpx.Pending("postgres", &pool, (*pgxpool.Pool).Ping),
		httpx.Pending("rabbitmq", &broker, brokerReady),
		httpx.Pending("rabbitmq_retry", &retry, brokerReady),
		httpx.Pending("consumer", &consumed, func(c *amqp.Consumer, _ context.Context) error { return c.Ready() }),
	}
	srv, err := httpx.Listen(ctx, cfg.HTTPAddr, logger, reg, "starting: not connected to its dependencies yet", checks...)
	if err != nil {
		return err
	}
	err = srv.Run(ctx, func(ctx context.Context) (func(context.Context) error, error) {
		p, err := pg.WaitPool(ctx, pg.WithPoolSize(cfg.DatabaseURL, cfg.poolSize()), logger,
			pg.CreatedBy(name+" migrate"), pg.RequireTables("processed_event"))
		if err != nil {
			return nil, err
		}
		pool.Store(p)
		conn, err := amqp.DialOptions(ctx, cfg.AMQPURL, topology, logger,
			amqp.Options{Name: name, Registerer: reg, RedeclareInterval: cfg.RedeclareInterval})
		if err != nil {
			return nil, fmt.Errorf("connect to the broker: %w", err)
		}
		broker.Store(conn)
		retryConn, err := amqp.DialOptions(ctx, cfg.AMQPURL, topology, logger,
			amqp.Options{Name: name + "-retry", Registerer: reg, RedeclareInterval: -1})
		if err != nil {
			return nil, fmt.Errorf("connect to the broker for retries: %w", err)
		}
		retry.Store(retryConn)

		ib := inbox.New(p, events.Consumer, validator, logger, reg, inbox.WithGroupCommit(cfg.InboxGroup, cfg.InboxTx))
		events.Register(ib, logger)
		sub, err := amqp.NewConsumer(conn, amqp.ConsumerConfig{
			Queue:       queue.Name,
			Name:        name,
			Workers:     cfg.Workers,
			Prefetch:    cfg.Prefetch,
			MaxAttempts: cfg.MaxAttempts,
			RetryDelays: cfg.RetryDelays,
			RetryConn:   retryConn,
			Probe:       p.Ping,
			// Dead letters are recorded, then copied with why (package dlq).
			DeadLetterQueue: queue.DeadLetterQueue,
			OnDeadLetter:    dlq.Recorder(p, events.Consumer),
		}, ib.HandleDelivery, logger, reg)
		if err != nil {
			return nil, fmt.Errorf("consumer: %w", err)
		}
		consumed.Store(sub)
		if err := reg.Register(dlq.NewCollector(p, conn, events.Consumer,
			[]string{queue.DeadLetterQueue, contracts.UnroutableQueue}, logger)); err != nil {
			return nil, fmt.Errorf("dead-letter metrics: %w", err)
		}
		srv.Ready(api.NewHandler(api.New(store.New(p), logger), logger, reg, checks...))
		logger.InfoContext(ctx, "connected", slog.String("database", config.MaskURL(cfg.DatabaseURL)),
			slog.String("amqp", config.MaskURL(cfg.AMQPURL)))
		return func(ctx context.Context) error {
			if err := sub.Run(ctx); err != nil {
				return fmt.Errorf("consumer: %w", err)
			}
			return nil
		}, nil
	})
	logger.InfoContext(ctx, "stopped", slog.Any("error", err))
	return err
}

// runMigrate creates the stock database if it is missing and applies the embedded
// migrations, logging each one and the outcome as JSON on stderr (migrate.Apply);
// running it again applies nothing.
func runMigrate(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := load(getenv, loadMigrateConfig)
	if err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, name+"-migrate")
	if err := migrate.Apply(ctx, cfg.DatabaseURL, migrations.FS, logger); err != nil {
		return fmt.Errorf("migrate %s: %w", config.MaskURL(cfg.DatabaseURL), err)
	}
	return nil
}

// runPurgeInbox deletes stock's processed_event keys older than olderThan
// (docs/architecture.md rule 5), refusing a missing horizon and one below
// INBOX_MIN_RETENTION: a key must outlive every copy of its message (retries,
// dead-letter replays), or that copy would be applied again.
func runPurgeInbox(ctx context.Context, getenv func(string) string, olderThan time.Duration, stdout io.Writer) error {
	cfg, err := load(getenv, loadPurgeConfig)
	if err != nil {
		return err
	}
	switch {
	case olderThan <= 0:
		return cli.Usagef("purge-inbox", "purge-inbox: --older-than DURATION is required and positive (e.g. --older-than 720h)")
	case olderThan < cfg.MinRetention:
		return fmt.Errorf("purge-inbox: --older-than %s is shorter than INBOX_MIN_RETENTION (%s): "+
			"keys must be kept longer than any copy of a message can come back (retries, dead-letter replays)",
			olderThan, cfg.MinRetention)
	}
	pool, err := pg.NewPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	start := time.Now()
	n, err := inbox.Purge(ctx, pool, events.Consumer, olderThan)
	if err != nil {
		return fmt.Errorf("purge-inbox: %d keys deleted before the failure: %w", n, err)
	}
	fmt.Fprintf(stdout, "purged %d processed_event keys older than %s in %s\n", n, olderThan, time.Since(start).Round(time.Millisecond))
	return nil
}

// runDLQ runs `dlq list|show|replay|drop` (package dlq) on stock.events.dlq, with
// INBOX_MIN_RETENTION as the horizon past which replay refuses a message.
func runDLQ(ctx context.Context, getenv func(string) string, args []string, stdout, stderr io.Writer) error {
	cfg, err := load(getenv, loadDLQConfig)
	if err != nil {
		return err
	}
	return dlq.Run(ctx, dlq.Config{
		Consumer: events.Consumer, Queue: contracts.QueueStock, DeadLetterQueue: contracts.QueueStockDLQ,
		DatabaseURL: cfg.DatabaseURL, AMQPURL: cfg.AMQPURL, Horizon: cfg.MinRetention,
		Logger: logging.New(stderr, cfg.LogLevel, name+"-dlq"),
		Env:    func(env *config.Env) { loadDLQConfig(env) },
	}, args, stdout, stderr)
}
