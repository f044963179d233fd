package consumerapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/dlq"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/pg"
)

// Deps are the dependencies of `<name> serve`: the database pool, the broker
// connection that consumes, the one that publishes retry copies (so that a broker
// blocking publishers never stalls the acks), and the consumer. Each is nil until
// connected; Checks reports them to /readyz meanwhile. Its methods are called from
// one goroutine (serve's start-up); Checks' functions may run on any.
type Deps struct {
	svc      Service
	cfg      ServeConfig
	queue    amqp.QueueSpec
	topology amqp.Topology

	pool     atomic.Pointer[pgxpool.Pool]
	broker   atomic.Pointer[amqp.Connection]
	retry    atomic.Pointer[amqp.Connection]
	consumer atomic.Pointer[amqp.Consumer]
}

// NewDeps prepares the dependencies of serve with cfg: the service's queue, with
// its retry levels and dead-letter queue, and the topology both broker
// connections declare (amqp.ConsumerQueue, amqp.EventTopology). It fails when the
// contract has no consumer named s.Name.
func (s Service) NewDeps(cfg ServeConfig) (*Deps, error) {
	consumer, ok := contracts.ConsumerNamed(s.Name)
	if !ok {
		return nil, errors.New("the contract has no consumer " + s.Name)
	}
	queue := amqp.ConsumerQueue(consumer, cfg.RetryDelays)
	return &Deps{svc: s, cfg: cfg, queue: queue, topology: amqp.EventTopology(queue)}, nil
}

// Checks are the readiness checks of serve: "postgres" (ping), "rabbitmq" and
// "rabbitmq_retry" (connected and not blocked) and "consumer" (subscribed, not
// paused); each fails with "not connected yet" until Connect or Consume stored it.
func (d *Deps) Checks() []httpx.Check {
	brokerReady := func(c *amqp.Connection, _ context.Context) error { return c.Ready() }
	return []httpx.Check{
		httpx.Pending("postgres", &d.pool, (*pgxpool.Pool).Ping),
		httpx.Pending("rabbitmq", &d.broker, brokerReady),
		httpx.Pending("rabbitmq_retry", &d.retry, brokerReady),
		httpx.Pending("consumer", &d.consumer, func(c *amqp.Consumer, _ context.Context) error { return c.Ready() }),
	}
}

// Connect waits for the database with pg.WaitPool (PoolSize connections unless the
// URL sets pool_max_conns; the processed_event table created by `<name> migrate`),
// then dials the broker twice with backoff, each connection declaring the
// service's topology; only the consuming one declares it again every
// AMQP_REDECLARE_INTERVAL. It returns the pool; it returns ctx's error when ctx
// ends first, and a wrapped error for a dependency that refuses for good.
func (d *Deps) Connect(ctx context.Context, logger *slog.Logger, reg prometheus.Registerer) (*pgxpool.Pool, error) {
	p, err := pg.WaitPool(ctx, pg.WithPoolSize(d.cfg.DatabaseURL, d.cfg.PoolSize()), logger,
		pg.CreatedBy(d.svc.Name+" migrate"), pg.RequireTables("processed_event"))
	if err != nil {
		return nil, err
	}
	d.pool.Store(p)
	conn, err := amqp.DialOptions(ctx, d.cfg.AMQPURL, d.topology, logger,
		amqp.Options{Name: d.svc.Name, Registerer: reg, RedeclareInterval: d.cfg.RedeclareInterval})
	if err != nil {
		return nil, fmt.Errorf("connect to the broker: %w", err)
	}
	d.broker.Store(conn)
	retryConn, err := amqp.DialOptions(ctx, d.cfg.AMQPURL, d.topology, logger,
		amqp.Options{Name: d.svc.Name + "-retry", Registerer: reg, RedeclareInterval: -1})
	if err != nil {
		return nil, fmt.Errorf("connect to the broker for retries: %w", err)
	}
	d.retry.Store(retryConn)
	return p, nil
}

// Consume subscribes ib to the service's queue after Connect: <P>WORKERS
// deliveries at once, <P>PREFETCH ahead, retried through the retry levels and
// dead-lettered after <P>MAX_ATTEMPTS, each dead letter recorded in dead_letter
// before its copy (package dlq; docs/architecture.md rule 3). The consumer pauses
// while the database does not answer. It also registers the dead-letter metrics
// on reg. Run then consumes.
func (d *Deps) Consume(ib *inbox.Inbox, logger *slog.Logger, reg prometheus.Registerer) error {
	p, conn, retryConn := d.pool.Load(), d.broker.Load(), d.retry.Load()
	if p == nil || conn == nil || retryConn == nil {
		return errors.New("consumer: Consume called before Connect")
	}
	sub, err := amqp.NewConsumer(conn, amqp.ConsumerConfig{
		Queue:       d.queue.Name,
		Name:        d.svc.Name,
		Workers:     d.cfg.Workers,
		Prefetch:    d.cfg.Prefetch,
		MaxAttempts: d.cfg.MaxAttempts,
		RetryDelays: d.cfg.RetryDelays,
		RetryConn:   retryConn,
		Probe:       p.Ping,
		// Dead letters are recorded, then copied with why (package dlq).
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

// Run consumes the queue after Consume until ctx ends (amqp.Consumer.Run): it
// returns nil then, and the consumer's error, wrapped, when it stops for good.
func (d *Deps) Run(ctx context.Context) error {
	sub := d.consumer.Load()
	if sub == nil {
		return errors.New("consumer: Run called before Consume")
	}
	if err := sub.Run(ctx); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	return nil
}

// Close closes the broker connections and the pool that were opened.
func (d *Deps) Close() {
	for _, c := range []*amqp.Connection{d.retry.Load(), d.broker.Load()} {
		if c != nil {
			_ = c.Close()
		}
	}
	if p := d.pool.Load(); p != nil {
		p.Close()
	}
}
