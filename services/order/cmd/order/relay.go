package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/telemetry"
	"example.com/shop/services/order/internal/api"
)

// relayConfig is the configuration of `order relay`, read from the environment:
//
//	ORDER_DATABASE_URL     PostgreSQL URL of the order database (default postgres://postgres@localhost:5432/orders?sslmode=disable)
//	AMQP_URL               RabbitMQ URL (default amqp://guest:guest@localhost:5672/)
//	HTTP_ADDR              address of /healthz, /readyz and /metrics (default :8084)
//	RELAY_PARTITIONS       outbox partitions, each led by one relay and published in order on its
//	                       own; every relay of one database must use the same value (default 1)
//	RELAY_BATCH_SIZE       rows per batch of one partition (default 500)
//	RELAY_POLL_INTERVAL    wait without NOTIFY before looking anyway; first wait after a failed batch (default 1s)
//	RELAY_MAX_BACKOFF      cap of the doubling wait between attempts after failed batches (default 10s)
//	RELAY_CONFIRM_TIMEOUT  bound on publishing one batch, confirms included (default 5s)
//	RELAY_STALL_TIMEOUT    a leader failing to publish for this long makes /readyz answer 503 (default 15s)
//	RELAY_LOCK_RETRY       how often a relay looks at who leads which partition: takes free ones, gives extra back (default 1s)
//	RELAY_LOCK_TIMEOUT     idle_session_timeout of the relay's lock session: a frozen relay loses its partitions after it (default 5s)
//	RELAY_LOCK_KEEPALIVE   how often the relay talks to its lock session at the least; at most half of RELAY_LOCK_TIMEOUT (default 1s)
//	RELAY_DECLARE_QUEUES   also declare the consumers' queues (default true); false declares
//	                       only the exchanges and the unroutable queue, for a broker user that
//	                       may not read the consumers' queues (deploy/rabbitmq/definitions.json)
//	LOG_LEVEL              debug, info, warn or error (default info)
//
// Durations are Go durations such as 500ms, 5s or 1m.
type relayConfig struct {
	DatabaseURL string
	AMQPURL     string
	HTTPAddr    string
	LogLevel    slog.Level
	Relay       outbox.RelayConfig
	// DeclareQueues: declare every consumer's queue (relayTopology), not only the exchanges.
	DeclareQueues bool
}

// loadRelayConfig reads relayConfig through env; env.Err names every bad variable.
func loadRelayConfig(env *config.Env) relayConfig {
	c := relayConfig{
		DatabaseURL: pg.URLFromEnv(env, "ORDER_DATABASE_URL", defaultDatabaseURL),
		AMQPURL:     amqp.URLFromEnv(env, "AMQP_URL", config.DefaultAMQPURL),
		HTTPAddr:    env.String("HTTP_ADDR", defaultRelayHTTPAddr),
		LogLevel:    logging.LevelFromEnv(env),
		// Declaring a queue with a dead-letter exchange needs the right to read it.
		DeclareQueues: env.Bool("RELAY_DECLARE_QUEUES", true),
		Relay: outbox.RelayConfig{
			Partitions:     env.PositiveInt("RELAY_PARTITIONS", outbox.DefaultPartitions),
			BatchSize:      env.PositiveInt("RELAY_BATCH_SIZE", outbox.DefaultBatchSize),
			PollInterval:   env.PositiveDuration("RELAY_POLL_INTERVAL", outbox.DefaultPollInterval),
			MaxBackoff:     env.PositiveDuration("RELAY_MAX_BACKOFF", outbox.DefaultMaxBackoff),
			ConfirmTimeout: env.PositiveDuration("RELAY_CONFIRM_TIMEOUT", outbox.DefaultConfirmTimeout),
			StallTimeout:   env.PositiveDuration("RELAY_STALL_TIMEOUT", outbox.DefaultStallTimeout),
			LockRetry:      env.PositiveDuration("RELAY_LOCK_RETRY", outbox.DefaultLockRetry),
			LockTimeout:    env.PositiveDuration("RELAY_LOCK_TIMEOUT", outbox.DefaultLockTimeout),
			LockKeepalive:  env.PositiveDuration("RELAY_LOCK_KEEPALIVE", outbox.DefaultLockKeepalive),
		},
	}
	if c.Relay.Partitions > outbox.MaxPartitions {
		env.Errorf("RELAY_PARTITIONS", "%d is more than %d", c.Relay.Partitions, outbox.MaxPartitions)
	}
	if 2*c.Relay.LockKeepalive > c.Relay.LockTimeout {
		env.Errorf("RELAY_LOCK_KEEPALIVE", "%v is more than half of RELAY_LOCK_TIMEOUT (%v)", c.Relay.LockKeepalive, c.Relay.LockTimeout)
	}
	return c
}

// LogValue logs the configuration with the passwords masked.
func (c relayConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("database_url", config.MaskURL(c.DatabaseURL)),
		slog.String("amqp_url", config.MaskURL(c.AMQPURL)),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("log_level", c.LogLevel.String()),
		slog.Int("partitions", c.Relay.Partitions),
		slog.Int("batch_size", c.Relay.BatchSize),
		slog.Duration("poll_interval", c.Relay.PollInterval),
		slog.Duration("max_backoff", c.Relay.MaxBackoff),
		slog.Duration("confirm_timeout", c.Relay.ConfirmTimeout),
		slog.Duration("stall_timeout", c.Relay.StallTimeout),
		slog.Duration("lock_retry", c.Relay.LockRetry),
		slog.Duration("lock_timeout", c.Relay.LockTimeout),
		slog.Duration("lock_keepalive", c.Relay.LockKeepalive),
	)
}

// runRelay runs the outbox relay (docs/architecture.md, flow step 3) until
// ctx ends: config, logger, HTTP server (/healthz, /readyz, /metrics),
// database pool (waited for with pg.WaitPool), broker connection (dialled
// with backoff; it declares the topology), then the relay, which leads its
// share of the outbox partitions (RELAY_PARTITIONS), each published on a
// channel of its own, or stands by. /readyz checks PostgreSQL, the broker
// connection and the relay, and answers 503 until both are connected, and
// while a partition it leads has not been able to publish for
// RELAY_STALL_TIMEOUT (outbox.Relay.Ready); a relay leading nothing is ready
// too (relay_partition_leader tells them apart). On ctx's end the batches in
// hand are finished or rolled back, then
// the HTTP server shuts down within httpx.ShutdownTimeout; ctx's end while it
// still waits for a dependency is a clean shutdown too (nil).
func runRelay(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.Load(getenv, loadRelayConfig)
	if err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, serviceRelay)
	stopTracing, err := telemetry.Start(ctx, serviceRelay, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	logger.InfoContext(ctx, "starting relay", slog.Any("config", cfg))

	// Serve health and metrics while the database and the broker are awaited.
	var (
		db     atomic.Pointer[pgxpool.Pool]
		broker atomic.Pointer[amqp.Connection]
		relay  atomic.Pointer[outbox.Relay]
	)
	reg := metrics.NewRegistry()
	router := httpx.NewRouter(logger, reg,
		httpx.Pending("postgres", &db, (*pgxpool.Pool).Ping),
		httpx.Pending("rabbitmq", &broker, func(c *amqp.Connection, _ context.Context) error { return c.Ready() }),
		httpx.Pending("publishing", &relay, func(r *outbox.Relay, _ context.Context) error { return r.Ready() }),
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
		pool, err := pg.WaitPool(ctx, cfg.DatabaseURL, logger, pg.CreatedBy(migrateCommand), pg.RequireTables("outbox"))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		defer pool.Close()
		db.Store(pool)

		topo := relayTopology(cfg.DeclareQueues)
		conn, err := amqp.Dial(ctx, cfg.AMQPURL, topo, logger)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		defer func() { _ = conn.Close() }()
		broker.Store(conn)
		// One publisher (one channel) per partition led; the relay closes it.
		newPublisher := func() outbox.Publisher { return outbox.AMQPPublisher(amqp.NewPublisher(conn, topo.Exchange)) }
		r, err := outbox.NewRelay(pool, newPublisher, cfg.Relay, logger, reg, outbox.WithBrokerStatus(conn.Ready))
		if err != nil {
			return err
		}
		relay.Store(r)
		return r.Run(ctx)
	}()
	cancel()
	err = errors.Join(relayErr, <-served)
	logger.InfoContext(ctx, "relay stopped", slog.Any("error", err))
	return err
}

// purgeConfig is the configuration of `order purge-outbox`: ORDER_DATABASE_URL
// and LOG_LEVEL, as for serve, and OUTBOX_REPLAY_HORIZON, the shortest
// --older-than it accepts.
type purgeConfig struct {
	DatabaseURL   string
	LogLevel      slog.Level
	ReplayHorizon time.Duration
}

// loadPurgeConfig reads purgeConfig through env; env.Err names every bad variable.
func loadPurgeConfig(env *config.Env) purgeConfig {
	return purgeConfig{
		DatabaseURL:   pg.URLFromEnv(env, "ORDER_DATABASE_URL", defaultDatabaseURL),
		LogLevel:      logging.LevelFromEnv(env),
		ReplayHorizon: env.PositiveDuration("OUTBOX_REPLAY_HORIZON", outbox.DefaultReplayHorizon),
	}
}

// runPurgeOutbox deletes the outbox rows published longer ago than the
// horizon olderThan (the --older-than flag, a Go duration such as 168h,
// required, > 0), then the API's Idempotency-Keys (processed_event, consumer
// api.IdempotencyConsumer) older than the same horizon, and prints how many of
// each it deleted (docs/architecture.md, rule 5). Unpublished rows are never
// deleted. A horizon shorter than OUTBOX_REPLAY_HORIZON is refused (exit 1):
// a typo such as --older-than 2m cannot wipe what replay-outbox and retried
// Idempotency-Keys still need.
func runPurgeOutbox(ctx context.Context, olderThan time.Duration, getenv func(string) string, stdout, stderr io.Writer) error {
	if olderThan <= 0 {
		return cli.Usagef("purge-outbox", "purge-outbox: --older-than must be a positive duration such as 168h, got %v", olderThan)
	}
	cfg, err := config.Load(getenv, loadPurgeConfig)
	if err != nil {
		return err
	}
	if olderThan < cfg.ReplayHorizon {
		// A shorter horizon would delete rows replay-outbox must still find and
		// Idempotency-Keys a client may still retry with (a retry would create anew).
		return fmt.Errorf("purge-outbox: --older-than %s is shorter than OUTBOX_REPLAY_HORIZON (%s): "+
			"published rows and Idempotency-Keys are kept as long as a period can be replayed",
			olderThan, cfg.ReplayHorizon)
	}
	logger := logging.New(stderr, cfg.LogLevel, servicePurge)

	pool, err := pg.NewPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	start := time.Now()
	n, err := outbox.Purge(ctx, pool, olderThan)
	logger.InfoContext(ctx, "outbox purged", slog.Int64("rows", n), slog.Duration("older_than", olderThan),
		slog.Duration("took", time.Since(start)), slog.Any("error", err))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "purged %d outbox rows published more than %v ago\n", n, olderThan)

	// The API's Idempotency-Keys share the horizon: a retry older than it creates anew.
	keys, err := inbox.Purge(ctx, pool, api.IdempotencyConsumer, olderThan)
	logger.InfoContext(ctx, "idempotency keys purged", slog.Int64("rows", keys), slog.Any("error", err))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "purged %d idempotency keys used more than %v ago\n", keys, olderThan)
	return nil
}

// relayTopology is what the relay declares (docs/architecture.md, flow step 4): the
// event exchange app.events with its alternate exchange and unroutable queue, the
// dead-letter exchange and, with queues, every consumer's queue of the contract with
// its dead-letter queue and no retry queue, so an event published before a consumer
// first starts waits in its queue instead of the unroutable one.
func relayTopology(queues bool) amqp.Topology {
	if !queues {
		return amqp.EventTopology()
	}
	var specs []amqp.QueueSpec
	for _, c := range contracts.Consumers() {
		specs = append(specs, amqp.ConsumerQueue(c, nil))
	}
	return amqp.EventTopology(specs...)
}
