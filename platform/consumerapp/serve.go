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
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/telemetry"
)

// Handlers registers a service's event handlers on its inbox (inbox.On,
// inbox.OnGroup); logger is serve's.
type Handlers func(ib *inbox.Inbox, logger *slog.Logger)

// ServeCommand is `<name> serve`: the HTTP API and the consumer of the service's
// queue (contracts.ConsumerNamed), with the service's own event handlers and
// routes. It reads ServeConfig through getenv and logs JSON to stderr; serve states
// the life cycle.
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

// brokerHeadStart is how long serve waits for the broker before a service that
// serves without it answers its routes (Service.ServesWithoutBroker): 5 s.
const brokerHeadStart = 5 * time.Second

// serve runs the HTTP API and the consumer until ctx ends or one of them fails,
// then stops both. It reads top to bottom: configuration, logger and tracing; the
// HTTP server, listening first and answering /healthz, /metrics and /readyz (503
// until the routes serve) and a 503 problem on every other path; with
// MIGRATE_ON_START, Service.Schema applied, retried while the server
// does not answer (pg.Retry); the database, waited for with pg.WaitPool
// (deps.connectDatabase), and the broker, dialled twice with backoff (one
// connection consumes, the other publishes retry and dead-letter copies, so that
// a broker blocking publishers never stalls the acks), each declaring the
// service's topology (deps.connectBroker); the inbox with the service's handlers
// (docs/architecture.md rule 3); the consumer (deps.consume); the service's
// routes; then consuming until ctx ends, and the shutdown bounded by the
// consumer's and the server's timeouts. With Service.ServesWithoutBroker the
// routes come once the consumer is set up or brokerHeadStart after the database,
// whichever is first, and a broker that is away is waited for behind them.
//
// /readyz answers 503 until the routes serve, then checks "postgres" (ping),
// "rabbitmq" and "rabbitmq_retry" (connected and not blocked) and "consumer"
// (subscribed, not paused); with
// Service.ServesWithoutBroker, "postgres" alone. While the database or the
// retry path is unavailable the consumer pauses and resumes once both answer.
//
// It returns nil after a clean shutdown, also when ctx ends while it still waits
// for a dependency.
func (s Service) serve(ctx context.Context, getenv func(string) string, stderr io.Writer, handlers Handlers, routes httpx.Routes) error {
	cfg, err := config.Load(getenv, s.LoadServeConfig)
	if err != nil {
		return err
	}
	logger, stopTracing, err := telemetry.StartProcess(ctx, stderr, cfg.LogLevel, s.Name, "starting", cfg)
	if err != nil {
		return err
	}
	defer stopTracing()
	deps, err := s.newDeps(cfg)
	if err != nil {
		return err
	}
	defer deps.close()
	validator, err := contracts.NewValidator()
	if err != nil {
		return err
	}

	reg := metrics.NewRegistry()
	checks := deps.checks()
	if s.ServesWithoutBroker {
		checks = checks[:1] // postgres
	}
	srv, err := httpx.Listen(ctx, cfg.HTTPAddr, logger, reg, "starting: not connected to its dependencies yet", checks...)
	if err != nil {
		return err
	}
	err = srv.Run(ctx, func(ctx context.Context) (func(context.Context) error, error) {
		pool, err := deps.connectDatabase(ctx, logger)
		if err != nil {
			return nil, err
		}
		ib := inbox.New(pool, s.Name, validator, logger, reg, inbox.WithGroupCommit(cfg.InboxGroup, cfg.InboxTx),
			inbox.WithPublishers(Publishers(cfg.RelayUsers)))
		handlers(ib, logger)
		for _, e := range s.contract().Events {
			if !ib.Handles(e) {
				return nil, fmt.Errorf("%s receives %s (contracts/registry.go) but registers no handler for it (inbox.On): each would be dead-lettered", s.Name, e)
			}
		}
		ready := func() { srv.Ready(routes(pool, logger, reg, checks)) }
		if s.ServesWithoutBroker {
			return deps.behindRoutes(ready, ib, logger, reg), nil
		}
		if err := deps.subscribe(ctx, ib, logger, reg); err != nil {
			return nil, err
		}
		ready()
		return deps.run, nil
	})
	logger.InfoContext(ctx, "stopped", slog.Any("error", err))
	return err
}

// deps are the dependencies of serve: the database pool, the broker connection
// that consumes, the one that publishes retry and dead-letter copies, and the
// consumer. Each is nil until connected; checks reports them to /readyz meanwhile.
// Its methods are called from serve's start-up, in order; checks' functions may run
// on any goroutine.
type deps struct {
	svc      Service
	cfg      ServeConfig
	queue    amqp.QueueSpec
	topology amqp.Topology

	pool     atomic.Pointer[pgxpool.Pool]
	broker   atomic.Pointer[amqp.Connection]
	retry    atomic.Pointer[amqp.Connection]
	consumer atomic.Pointer[amqp.Consumer]
}

// newDeps prepares the dependencies of serve with cfg: the service's queue, with
// its retry levels and dead-letter queue, and the topology both broker
// connections declare (amqp.ConsumerQueue, amqp.EventTopology). It fails when the
// contract has no consumer named s.Name.
func (s Service) newDeps(cfg ServeConfig) (*deps, error) {
	consumer, ok := contracts.ConsumerNamed(s.Name)
	if !ok {
		return nil, errors.New("the contract has no consumer " + s.Name)
	}
	queue := amqp.ConsumerQueue(consumer, cfg.RetryDelays)
	return &deps{svc: s, cfg: cfg, queue: queue, topology: amqp.EventTopology(queue)}, nil
}

// checks are the readiness checks of serve: "postgres" (ping), "rabbitmq" and
// "rabbitmq_retry" (connected and not blocked) and "consumer" (subscribed, not
// paused); each fails with "not connected yet" until connect or consume stored it.
func (d *deps) checks() []httpx.Check {
	brokerReady := func(c *amqp.Connection, _ context.Context) error { return c.Ready() }
	return []httpx.Check{
		httpx.Pending("postgres", &d.pool, (*pgxpool.Pool).Ping),
		httpx.Pending("rabbitmq", &d.broker, brokerReady),
		httpx.Pending("rabbitmq_retry", &d.retry, brokerReady),
		httpx.Pending("consumer", &d.consumer, func(c *amqp.Consumer, _ context.Context) error { return c.Ready() }),
	}
}

// behindRoutes returns serve's loop for a service that serves without the broker:
// it subscribes ib (subscribe) and consumes (run), and calls ready, which mounts
// the routes, once subscribed or brokerHeadStart from now, whichever is first.
// Waiting for the queue's declaration keeps an answer to an order taken from then
// on out of the unroutable queue; a broker that is away does not hold orders
// back. The loop returns nil when ctx ends, also while it still connects.
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
	logger.InfoContext(ctx, "connected", slog.String("database", config.MaskURL(d.cfg.DatabaseURL)),
		slog.String("amqp", config.MaskURL(d.cfg.AMQPURL)))
	return nil
}

// connectDatabase applies Service.Schema first when MIGRATE_ON_START is true
// (retried while the server does not answer, pg.Retry), then waits for the
// database with pg.WaitPool (PoolSize connections unless the URL sets
// pool_max_conns; the processed_event table created by `<name> migrate`) and
// returns the pool; it returns ctx's error when ctx ends first, and a wrapped
// error for a database that refuses for good.
func (d *deps) connectDatabase(ctx context.Context, logger *slog.Logger) (*pgxpool.Pool, error) {
	if d.cfg.MigrateOnStart {
		if err := migrate.OnStart(ctx, d.cfg.DatabaseURL, d.svc.Schema, logger); err != nil {
			return nil, err
		}
	}
	p, err := pg.WaitPool(ctx, pg.WithPoolSize(d.cfg.DatabaseURL, d.cfg.PoolSize()), logger,
		pg.CreatedBy(d.svc.Name+" migrate"), pg.RequireTables("processed_event"))
	if err != nil {
		return nil, err
	}
	d.pool.Store(p)
	return p, nil
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
	p, conn := d.pool.Load(), d.broker.Load()
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

// close closes the broker connections that were opened, both at once, so that
// they are done within one amqp.DefaultCloseTimeout whatever the broker does, then
// the pool.
func (d *deps) close() {
	_ = amqp.CloseAll(d.retry.Load(), d.broker.Load())
	pg.Close(d.pool.Load())
}
