package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
	"example.com/shop/services/stock/internal/reservation"
	"example.com/shop/services/stock/migrations"
)

const usage = `usage: stock serve | migrate | purge-inbox --older-than DURATION`

// run is the whole program: args are os.Args, getenv reads the environment, command
// output goes to stdout and JSON logs to stderr. It returns when the command is done or,
// for serve, after ctx ends and everything has shut down.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		return errors.New(usage)
	}
	cfg, err := loadSettings(getenv)
	if err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, "stock")
	switch cmd := args[1]; cmd {
	case "serve":
		return serve(ctx, cfg, logger)
	case "migrate":
		return migrateDB(ctx, cfg, stdout)
	case "purge-inbox":
		return purgeInbox(ctx, cfg, args[2:], stdout, stderr)
	default:
		return fmt.Errorf("unknown command %q; %s", cmd, usage)
	}
}

// serve runs the HTTP API and the consumer of stock.events until ctx ends or one of
// them fails, then stops both.
func serve(ctx context.Context, cfg settings, logger *slog.Logger) error {
	logger.Info("starting", slog.String("database", config.MaskURL(cfg.DatabaseURL)),
		slog.String("amqp", config.MaskURL(cfg.AMQPURL)), slog.String("http_addr", cfg.HTTPAddr),
		slog.Int("workers", cfg.Workers), slog.Int("prefetch", cfg.Prefetch),
		slog.Int("inbox_group", cfg.InboxGroup), slog.Int("inbox_tx", cfg.InboxTx),
		slog.Int("max_attempts", cfg.MaxAttempts), slog.Any("retry_delays", cfg.RetryDelays))

	pool, err := pg.NewPool(ctx, withPoolSize(cfg.DatabaseURL, cfg.poolSize()))
	if err != nil {
		return err
	}
	defer pool.Close()

	conn, err := amqp.Dial(ctx, cfg.AMQPURL, reservation.Topology(cfg.RetryDelays), logger)
	if err != nil {
		return fmt.Errorf("connect to the broker: %w", err)
	}
	defer func() { _ = conn.Close() }()

	validator, err := contracts.NewValidator()
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	ib := inbox.New(pool, reservation.Consumer, validator, logger, reg, inbox.WithGroupCommit(cfg.InboxGroup, cfg.InboxTx))
	reservation.Register(ib)
	consumer, err := amqp.NewConsumer(conn, amqp.ConsumerConfig{
		Queue:       contracts.QueueStock,
		Name:        reservation.Consumer,
		Workers:     cfg.Workers,
		Prefetch:    cfg.Prefetch,
		MaxAttempts: cfg.MaxAttempts,
		RetryDelays: cfg.RetryDelays,
	}, ib.HandleDelivery, logger, reg)
	if err != nil {
		return err
	}

	router := httpx.NewRouter(logger, reg,
		httpx.Check{Name: "postgres", Fn: pool.Ping},
		httpx.Check{Name: "rabbitmq", Fn: func(context.Context) error { return conn.Ready() }},
	)
	reservation.Routes(router, pool, logger)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() {
		err := consumer.Run(ctx)
		if err != nil {
			err = fmt.Errorf("consumer: %w", err)
		}
		errs <- err
		cancel()
	}()
	go func() {
		err := httpx.Serve(ctx, cfg.HTTPAddr, router, logger)
		if err != nil {
			err = fmt.Errorf("http: %w", err)
		}
		errs <- err
		cancel()
	}()
	err = errors.Join(<-errs, <-errs)
	logger.Info("stopped", slog.Any("error", err))
	return err
}

func migrateDB(ctx context.Context, cfg settings, stdout io.Writer) error {
	applied, err := migrate.Up(ctx, cfg.DatabaseURL, migrations.FS)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", config.MaskURL(cfg.DatabaseURL), err)
	}
	for _, m := range applied {
		fmt.Fprintf(stdout, "applied %05d %s\n", m.Version, m.Source)
	}
	fmt.Fprintf(stdout, "stock database is up to date (%d migrations applied now)\n", len(applied))
	return nil
}

// purgeInbox deletes the stock consumer's processed_event keys older than --older-than,
// refusing a horizon below INBOX_MIN_RETENTION: a key must outlive every copy of its
// message (retries, dead-letter replays), or that copy would be applied again.
func purgeInbox(ctx context.Context, cfg settings, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("purge-inbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	olderThan := fs.Duration("older-than", 0, "delete keys processed longer ago than this (e.g. 720h)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("purge-inbox: unexpected argument %q", fs.Arg(0))
	}
	switch {
	case *olderThan == 0:
		return errors.New("purge-inbox: --older-than DURATION is required (e.g. --older-than 720h)")
	case *olderThan < cfg.MinRetention:
		return fmt.Errorf("purge-inbox: --older-than %s is shorter than INBOX_MIN_RETENTION (%s): "+
			"keys must be kept longer than any copy of a message can come back (retries, dead-letter replays)",
			*olderThan, cfg.MinRetention)
	}
	pool, err := pg.NewPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	start := time.Now()
	n, err := inbox.Purge(ctx, pool, reservation.Consumer, *olderThan)
	if err != nil {
		return fmt.Errorf("purge-inbox: %d keys deleted before the failure: %w", n, err)
	}
	fmt.Fprintf(stdout, "purged %d processed_event keys older than %s in %s\n", n, *olderThan, time.Since(start).Round(time.Millisecond))
	return nil
}
