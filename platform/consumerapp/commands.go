package consumerapp

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

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/platform/dlq"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
)

// serve runs the HTTP API and the consumer of spec.Queue until ctx ends or one of them
// fails, then stops both. Start-up reads top to bottom: HTTP first, answering /healthz,
// /metrics and /readyz (503 until PostgreSQL and the broker are connected) and a 503
// problem on every other path; then the database, waited for with pg.WaitPool; the
// broker (declaring Topology), dialled with amqp.DialOptions' backoff, twice: one
// connection consumes, the other publishes retry copies, so that a broker blocking
// publishers (resource alarm) never stalls the acks; the inbox with the service's
// handlers (docs/architecture.md, rule 3), the consumer, and the service's routes.
//
// /readyz checks "postgres" (ping), "rabbitmq" and "rabbitmq_retry" (connected and not
// blocked) and "consumer" (subscribed, not paused): a database outage shows as
// postgres and consumer, a blocked retry path as rabbitmq_retry and consumer. While the
// database or the retry path is unavailable the consumer pauses (amqp.Consumer) and
// resumes once the database answers a ping and the retry connection is ready.
//
// It returns nil after a clean shutdown, also when ctx ends while it still waits for
// a dependency.
func serve(ctx context.Context, spec Spec, cfg Settings, logger *slog.Logger) error {
	logger.Info("starting", slog.String("database", config.MaskURL(cfg.DatabaseURL)),
		slog.String("amqp", config.MaskURL(cfg.AMQPURL)), slog.String("http_addr", cfg.HTTPAddr),
		slog.Int("workers", cfg.Workers), slog.Int("prefetch", cfg.Prefetch),
		slog.Int("inbox_group", cfg.InboxGroup), slog.Int("inbox_tx", cfg.InboxTx),
		slog.Int("max_attempts", cfg.MaxAttempts), slog.Any("retry_delays", cfg.RetryDelays))

	validator, err := contracts.NewValidator()
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	var (
		pool     atomic.Pointer[pgxpool.Pool]
		broker   atomic.Pointer[amqp.Connection]
		retry    atomic.Pointer[amqp.Connection]
		consumer atomic.Pointer[amqp.Consumer]
	)
	defer func() {
		for _, c := range []*amqp.Connection{retry.Load(), broker.Load()} {
			if c != nil {
				_ = c.Close()
			}
		}
		if p := pool.Load(); p != nil {
			p.Close()
		}
	}()
	brokerReady := func(c *amqp.Connection, _ context.Context) error { return c.Ready() }
	checks := []httpx.Check{
		httpx.Pending("postgres", &pool, (*pgxpool.Pool).Ping),
		httpx.Pending("rabbitmq", &broker, brokerReady),
		httpx.Pending("rabbitmq_retry", &retry, brokerReady),
		httpx.Pending("consumer", &consumer, func(c *amqp.Consumer, _ context.Context) error { return c.Ready() }),
	}

	// Serve health, readiness and metrics while the dependencies are awaited; the
	// service's routes join once they are connected.
	handler := httpx.NewSwitch(httpx.StartingRouter(logger, reg, "starting: not connected to its dependencies yet", checks...))
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("http listen %s: %w", cfg.HTTPAddr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() {
		errc <- wrap("http", httpx.ServeListener(ctx, ln, handler, logger))
		cancel() // a server failure stops the rest too
	}()

	c, err := func() (*amqp.Consumer, error) {
		p, err := pg.WaitPool(ctx, withPoolSize(cfg.DatabaseURL, cfg.poolSize()), logger,
			pg.CreatedBy(spec.Name+" migrate"), pg.RequireTables("processed_event"))
		if err != nil {
			return nil, err
		}
		pool.Store(p)
		topo := Topology(spec.Queue, cfg.RetryDelays)
		conn, err := amqp.DialOptions(ctx, cfg.AMQPURL, topo, logger,
			amqp.Options{Name: spec.Name, Registerer: reg, RedeclareInterval: cfg.RedeclareInterval})
		if err != nil {
			return nil, fmt.Errorf("connect to the broker: %w", err)
		}
		broker.Store(conn)
		retryConn, err := amqp.DialOptions(ctx, cfg.AMQPURL, topo, logger,
			amqp.Options{Name: spec.Name + "-retry", Registerer: reg, RedeclareInterval: -1})
		if err != nil {
			return nil, fmt.Errorf("connect to the broker for retries: %w", err)
		}
		retry.Store(retryConn)
		ib := inbox.New(p, spec.Name, validator, logger, reg, inbox.WithGroupCommit(cfg.InboxGroup, cfg.InboxTx))
		spec.Register(ib, logger)
		sub, err := amqp.NewConsumer(conn, amqp.ConsumerConfig{
			Queue:       spec.Queue.Name,
			Name:        spec.Name,
			Workers:     cfg.Workers,
			Prefetch:    cfg.Prefetch,
			MaxAttempts: cfg.MaxAttempts,
			RetryDelays: cfg.RetryDelays,
			RetryConn:   retryConn,
			Probe:       p.Ping,
			// Dead letters are recorded, then copied with why (package dlq).
			DeadLetterQueue: spec.Queue.DeadLetterQueue,
			OnDeadLetter:    dlq.Recorder(p, spec.Name),
		}, ib.HandleDelivery, logger, reg)
		if err != nil {
			return nil, fmt.Errorf("consumer: %w", err)
		}
		consumer.Store(sub)
		if err := reg.Register(dlq.NewCollector(p, conn, spec.Name,
			[]string{spec.Queue.DeadLetterQueue, contracts.UnroutableQueue}, logger)); err != nil {
			return nil, fmt.Errorf("dead-letter metrics: %w", err)
		}
		router := httpx.NewRouter(logger, reg, checks...)
		if spec.Routes != nil {
			spec.Routes(router, p, logger)
		}
		handler.Set(router)
		return sub, nil
	}()
	if err != nil {
		if ctx.Err() != nil {
			err = nil // stopped while starting: a clean shutdown, unless HTTP failed
		}
		cancel()
		err = errors.Join(err, <-errc)
		logger.Info("stopped", slog.Any("error", err))
		return err
	}
	logger.Info("connected", slog.String("database", config.MaskURL(cfg.DatabaseURL)),
		slog.String("amqp", config.MaskURL(cfg.AMQPURL)))

	go func() { errc <- wrap("consumer", c.Run(ctx)) }()
	first := <-errc
	cancel() // one part stopped: stop the other
	err = errors.Join(first, <-errc)
	logger.Info("stopped", slog.Any("error", err))
	return err
}

// wrap names the part of serve that failed; nil stays nil.
func wrap(part string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", part, err)
	}
	return nil
}

// migrateDB creates the database if it is missing and applies spec.Migrations,
// logging each one it applied and the outcome (migrate.Apply).
func migrateDB(ctx context.Context, spec Spec, cfg Settings, logger *slog.Logger) error {
	if err := migrate.Apply(ctx, cfg.DatabaseURL, spec.Migrations, logger); err != nil {
		return fmt.Errorf("migrate %s: %w", config.MaskURL(cfg.DatabaseURL), err)
	}
	return nil
}

// purgeInbox deletes the service's processed_event keys older than --older-than
// (docs/architecture.md, rule 5), refusing a missing or negative horizon and one below
// INBOX_MIN_RETENTION: a key must outlive every copy of its message (retries,
// dead-letter replays), or that copy would be applied again.
func purgeInbox(ctx context.Context, spec Spec, cfg Settings, args []string, stdout, stderr io.Writer) error {
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
	case *olderThan <= 0:
		return errors.New("purge-inbox: --older-than DURATION is required and positive (e.g. --older-than 720h)")
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
	n, err := inbox.Purge(ctx, pool, spec.Name, *olderThan)
	if err != nil {
		return fmt.Errorf("purge-inbox: %d keys deleted before the failure: %w", n, err)
	}
	fmt.Fprintf(stdout, "purged %d processed_event keys older than %s in %s\n", n, *olderThan, time.Since(start).Round(time.Millisecond))
	return nil
}

// deadLetters runs `dlq list|show|replay|drop` (package dlq) on spec's dead-letter
// queue, with INBOX_MIN_RETENTION as the horizon past which replay refuses a message.
func deadLetters(ctx context.Context, spec Spec, cfg Settings, args []string, logger *slog.Logger, stdout, stderr io.Writer) error {
	return dlq.Run(ctx, dlq.Config{
		Consumer: spec.Name, Queue: spec.Queue.Name, DeadLetterQueue: spec.Queue.DeadLetterQueue,
		DatabaseURL: cfg.DatabaseURL, AMQPURL: cfg.AMQPURL, Horizon: cfg.MinRetention, Logger: logger,
	}, args, stdout, stderr)
}
