package consumerapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/dlq"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/serveapp"
)

// Handlers registers a service's event handlers on its inbox (inbox.On,
// inbox.OnGroup); logger is serve's.
type Handlers func(ib *inbox.Inbox, logger *slog.Logger)

// ServeCommand is `<name> serve` for a service whose API waits for the broker:
// the HTTP API and the consumer of the service's queue (contracts.ConsumerNamed),
// with the service's own event handlers and routes. It reads ServeConfig through
// getenv and logs JSON to stderr; serve states the life cycle. A service whose
// API writes to an outbox mounts producerapp's serve with Service.Consumer
// instead: its API answers while the broker is away.
func (s Service) ServeCommand(getenv func(string) string, stderr io.Writer, handlers Handlers, routes httpx.Routes) cli.Command {
	return cli.Command{
		Name:    "serve",
		Summary: "serve the HTTP API (HTTP_ADDR) and consume " + s.contract().Queue,
		Env:     func(env *config.Env) { s.LoadServeConfig(env) },
		Run: func(ctx context.Context, _ []string) error {
			return s.serve(ctx, getenv, stderr, handlers, routes)
		},
	}
}

// serve runs the HTTP API and the consumer in front of it (serveapp.Run) until
// ctx ends or one of them fails, then stops both: once the database answers, the
// consumer is set up (deps.Start), then the routes serve. /readyz answers 503
// until the routes serve, then checks "postgres" (ping), "rabbitmq" and
// "rabbitmq_retry" (connected and not blocked) and "consumer" (subscribed, not
// paused). While the database or the retry path is unavailable the consumer
// pauses and resumes once both answer. It returns nil after a clean shutdown,
// also when ctx ends while it still waits for a dependency.
func (s Service) serve(ctx context.Context, getenv func(string) string, stderr io.Writer, handlers Handlers, routes httpx.Routes) error {
	cfg, err := config.Load(getenv, s.LoadServeConfig)
	if err != nil {
		return err
	}
	api := serveapp.API{
		Name: s.Name, Config: cfg, LogLevel: cfg.LogLevel, DatabaseURL: cfg.DatabaseURL, HTTPAddr: cfg.HTTPAddr,
		MigrateOnStart: cfg.MigrateOnStart, Schema: s.Schema, Routes: routes,
	}
	d, err := s.Consumer(handlers).mount(cfg.ConsumeConfig, &api, false)
	if err != nil {
		return err
	}
	return serveapp.Run(ctx, stderr, api, d)
}

// inboxTable is the table a consuming serve waits for: processed_event, which a
// service's migrate creates after its outbox (migrations.Schema).
const inboxTable = "processed_event"

// Consumer is the service's consumer role, which a serve mounts: the inbox with
// handlers (docs/architecture.md rule 3) and the consumer of the service's queue
// (contracts.ConsumerNamed), dead letters recorded. ServeCommand mounts it in
// front of the API; producerapp's serve mounts it behind its API (Behind).
type Consumer struct {
	svc      Service
	handlers Handlers
}

// Consumer returns the service's consumer role with handlers.
func (s Service) Consumer(handlers Handlers) Consumer { return Consumer{svc: s, handlers: handlers} }

// Queue is the queue the consumer consumes, e.g. "order.events".
func (c Consumer) Queue() string { return c.svc.contract().Queue }

// LoadConfig reads ConsumeConfig through env; env.Err names every bad variable.
func (c Consumer) LoadConfig(env *config.Env) ConsumeConfig { return c.svc.loadConsumeConfig(env) }

// brokerHeadStart is how long a consumer mounted behind an API waits for the
// broker before the routes serve: 5 s.
const brokerHeadStart = 5 * time.Second

// Behind mounts the consumer, with cfg, behind api, an API that needs only its
// database (producerapp's serve: orders are taken into the outbox while the
// broker is away, rule 1). It sizes api's pool for the inbox transactions
// (ConsumeConfig.PoolSize, unless the URL sets pool_max_conns) and makes serve
// wait for the inbox's table too, then returns the role for serveapp.Run: the
// routes serve once the consumer is set up or brokerHeadStart after the
// database answers, whichever is first, and a broker that is away is waited for
// behind them. It adds no /readyz check: a broker outage shows in the amqp_*
// metrics and the logs, not in readiness. It fails when the contract has no
// consumer named after the service.
func (c Consumer) Behind(cfg ConsumeConfig, api *serveapp.API) (serveapp.Role, error) {
	return c.mount(cfg, api, true)
}

// mount sizes api's pool for the inbox transactions (ConsumeConfig.PoolSize,
// unless the URL sets pool_max_conns), adds the inbox's table to those serve
// waits for, and prepares the consumer's dependencies with cfg: the service's
// queue, with its retry levels and dead-letter queue, and the topology both
// broker connections declare (amqp.ConsumerQueue, amqp.EventTopology); behind
// says whether the routes serve before the consumer is set up. It fails when the
// contract has no consumer named after the service.
func (c Consumer) mount(cfg ConsumeConfig, api *serveapp.API, behind bool) (*deps, error) {
	api.DatabaseURL = pg.WithPoolSize(api.DatabaseURL, cfg.PoolSize())
	api.Tables = append(api.Tables, inboxTable)
	consumer, ok := contracts.ConsumerNamed(c.svc.Name)
	if !ok {
		return nil, errors.New("the contract has no consumer " + c.svc.Name)
	}
	queue := amqp.ConsumerQueue(consumer, cfg.RetryDelays)
	return &deps{svc: c.svc, handlers: c.handlers, cfg: cfg, behind: behind, queue: queue, topology: amqp.EventTopology(queue)}, nil
}

// deps are the consumer's dependencies in serve: the broker connection that
// consumes, the one that publishes retry and dead-letter copies, and the consumer;
// it is a serveapp.Role. Each is nil until connected; Checks reports them to
// /readyz meanwhile. Its methods are called from serve's start-up, in order;
// Checks' functions may run on any goroutine.
type deps struct {
	svc      Service
	handlers Handlers
	cfg      ConsumeConfig
	behind   bool
	queue    amqp.QueueSpec
	topology amqp.Topology

	pool     *pgxpool.Pool
	broker   atomic.Pointer[amqp.Connection]
	retry    atomic.Pointer[amqp.Connection]
	consumer atomic.Pointer[amqp.Consumer]
}

// Checks are the consumer's readiness checks in front of the API: "rabbitmq" and
// "rabbitmq_retry" (connected and not blocked) and "consumer" (subscribed, not
// paused); each fails with "not connected yet" until connectBroker or consume
// stored it. Behind an API, none.
func (d *deps) Checks() []httpx.Check {
	if d.behind {
		return nil
	}
	brokerReady := func(c *amqp.Connection, _ context.Context) error { return c.Ready() }
	return []httpx.Check{
		httpx.Pending("rabbitmq", &d.broker, brokerReady),
		httpx.Pending("rabbitmq_retry", &d.retry, brokerReady),
		httpx.Pending("consumer", &d.consumer, func(c *amqp.Consumer, _ context.Context) error { return c.Ready() }),
	}
}

// Start sets up the inbox over pool with the service's handlers, refusing a
// service that registers no handler for an event its contract receives. In
// front of the API it subscribes (subscribe), calls ready and returns run;
// behind it, it returns behindRoutes' loop.
func (d *deps) Start(ctx context.Context, pool *pgxpool.Pool, ready func(), logger *slog.Logger, reg prometheus.Registerer) (func(context.Context) error, error) {
	d.pool = pool
	validator, err := contracts.NewValidator()
	if err != nil {
		return nil, err
	}
	ib := inbox.New(pool, d.svc.Name, validator, logger, reg, inbox.WithGroupCommit(d.cfg.InboxGroup, d.cfg.InboxTx),
		inbox.WithPublishers(Publishers(d.cfg.RelayUsers)))
	d.handlers(ib, logger)
	for _, e := range d.svc.contract().Events {
		if !ib.Handles(e) {
			return nil, fmt.Errorf("%s receives %s (contracts/registry.go) but registers no handler for it (inbox.On): each would be dead-lettered", d.svc.Name, e)
		}
	}
	if d.behind {
		return d.behindRoutes(ready, ib, logger, reg), nil
	}
	if err := d.subscribe(ctx, ib, logger, reg); err != nil {
		return nil, err
	}
	ready()
	return d.run, nil
}

// behindRoutes returns serve's loop for a consumer behind the API: it subscribes
// ib (subscribe) and consumes (run), and calls ready, which mounts the routes,
// once subscribed or brokerHeadStart from now, whichever is first. Waiting for
// the queue's declaration keeps an answer to an order taken from then on out of
// the unroutable queue; a broker that is away does not hold orders back. The
// loop returns nil when ctx ends, also while it still connects.
func (d *deps) behindRoutes(ready func(), ib *inbox.Inbox, logger *slog.Logger, reg prometheus.Registerer) func(context.Context) error {
	ready = sync.OnceFunc(ready)
	headStart := time.AfterFunc(brokerHeadStart, ready)
	return func(ctx context.Context) error {
		defer headStart.Stop()
		if err := d.subscribe(ctx, ib, logger, reg); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while connecting: a clean shutdown
			}
			return err
		}
		ready()
		return d.run(ctx)
	}
}

// subscribe connects the broker (connectBroker) and sets up the consumer of ib
// (consume), then logs "connected". It returns ctx's error when ctx ends first.
func (d *deps) subscribe(ctx context.Context, ib *inbox.Inbox, logger *slog.Logger, reg prometheus.Registerer) error {
	if err := d.connectBroker(ctx, logger, reg); err != nil {
		return err
	}
	if err := d.consume(ib, logger, reg); err != nil {
		return err
	}
	logger.InfoContext(ctx, "connected", slog.String("amqp", config.MaskURL(d.cfg.AMQPURL)))
	return nil
}

// connectBroker dials the broker twice with backoff, each connection declaring the
// service's topology; only the consuming one declares it again every
// AMQP_REDECLARE_INTERVAL. It returns ctx's error when ctx ends first, and a
// wrapped error for a broker that refuses for good.
func (d *deps) connectBroker(ctx context.Context, logger *slog.Logger, reg prometheus.Registerer) error {
	conn, err := amqp.DialOptions(ctx, d.cfg.AMQPURL, d.topology, logger,
		amqp.Options{Name: d.svc.Name, Registerer: reg, RedeclareInterval: d.cfg.RedeclareInterval, Heartbeat: d.cfg.Heartbeat})
	if err != nil {
		return fmt.Errorf("connect to the broker: %w", err)
	}
	d.broker.Store(conn)
	retryConn, err := amqp.DialOptions(ctx, d.cfg.AMQPURL, d.topology, logger,
		amqp.Options{Name: d.svc.Name + "-retry", Registerer: reg, RedeclareInterval: -1, Heartbeat: d.cfg.Heartbeat})
	if err != nil {
		return fmt.Errorf("connect to the broker for retries: %w", err)
	}
	d.retry.Store(retryConn)
	return nil
}

// consume subscribes ib to the service's queue after connect: <P>WORKERS
// deliveries at once, <P>PREFETCH ahead, retried through the retry levels and
// dead-lettered after <P>MAX_ATTEMPTS (or at once when permanent), each dead
// letter recorded in dead_letter before its copy goes to the dead-letter queue
// (package dlq; docs/architecture.md rule 3). The consumer pauses while the
// database does not answer. It also registers the dead-letter metrics on reg. run
// then consumes.
func (d *deps) consume(ib *inbox.Inbox, logger *slog.Logger, reg prometheus.Registerer) error {
	p, conn := d.pool, d.broker.Load()
	sub, err := amqp.NewConsumer(conn, amqp.ConsumerConfig{
		Queue:           d.queue.Name,
		Name:            d.svc.Name,
		Workers:         d.cfg.Workers,
		Prefetch:        d.cfg.Prefetch,
		MaxAttempts:     d.cfg.MaxAttempts,
		RetryDelays:     d.cfg.RetryDelays,
		RetryConn:       d.retry.Load(),
		Probe:           p.Ping,
		DeadLetterQueue: d.queue.DeadLetterQueue,
		OnDeadLetter:    dlq.Recorder(p, d.svc.Name),
	}, ib.HandleDelivery, logger, reg)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	d.consumer.Store(sub)
	if err := reg.Register(dlq.NewCollector(p, conn, d.svc.Name,
		[]string{d.queue.DeadLetterQueue, contracts.UnroutableQueue}, logger)); err != nil {
		return fmt.Errorf("dead-letter metrics: %w", err)
	}
	return nil
}

// run consumes the queue after consume until ctx ends (amqp.Consumer.Run): it
// returns nil then, and the consumer's error, wrapped, when it stops for good.
func (d *deps) run(ctx context.Context) error {
	if err := d.consumer.Load().Run(ctx); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	return nil
}

// Close closes the broker connections that were opened, both at once, so that
// they are done within one amqp.DefaultCloseTimeout whatever the broker does.
func (d *deps) Close() {
	_ = amqp.CloseAll(d.retry.Load(), d.broker.Load())
}
