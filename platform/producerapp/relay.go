package producerapp

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/telemetry"
)

// Commands are the producer's three commands, in the order its help lists
// them: relay, purge-outbox and replay-outbox. getenv reads the environment,
// stdout takes a command's output and stderr its JSON log lines.
func (s Service) Commands(getenv func(string) string, stdout, stderr io.Writer) []cli.Command {
	return []cli.Command{s.RelayCommand(getenv, stderr), s.PurgeOutboxCommand(getenv, stdout, stderr), s.ReplayOutboxCommand(getenv, stdout, stderr)}
}

// RelayCommand is `<name> relay`: it publishes the service's outbox to the
// broker until ctx ends (Service.runRelay).
func (s Service) RelayCommand(getenv func(string) string, stderr io.Writer) cli.Command {
	return cli.Command{
		Name:    "relay",
		Summary: "publish the outbox to RabbitMQ (health and metrics on HTTP_ADDR)",
		Env:     func(env *config.Env) { s.LoadRelayConfig(env) },
		Run:     func(ctx context.Context, _ []string) error { return s.runRelay(ctx, getenv, stderr) },
	}
}

// runRelay runs the outbox relay (docs/architecture.md, flow step 3) until
// ctx ends, through httpx.Starting.Run: config, logger, the HTTP server
// (/healthz, /readyz, /metrics), then the database pool (waited for with
// pg.WaitPool), the broker connection (dialled with backoff; it declares
// Topology) and the relay, which leads its share of the outbox partitions
// (RELAY_PARTITIONS), each published on a channel of its own, or stands by.
// /readyz checks PostgreSQL, the broker connection and the relay: 503 until
// both are connected, and while a partition it leads has not been able to
// publish for RELAY_STALL_TIMEOUT (outbox.Relay.Ready); a relay leading
// nothing is ready too (relay_partition_leader tells them apart). On ctx's
// end the batches in hand are finished or rolled back, then the HTTP server
// shuts down within httpx.ShutdownTimeout; ctx's end while it still waits
// for a dependency is a clean shutdown too (nil).
func (s Service) runRelay(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.Load(getenv, s.LoadRelayConfig)
	if err != nil {
		return err
	}
	logger, stopTracing, err := telemetry.StartProcess(ctx, stderr, cfg.LogLevel, s.Name+"-relay", "starting relay", cfg)
	if err != nil {
		return err
	}
	defer stopTracing()

	var (
		db     atomic.Pointer[pgxpool.Pool]
		broker atomic.Pointer[amqp.Connection]
		relay  atomic.Pointer[outbox.Relay]
	)
	defer func() { pg.Close(db.Load()) }()
	defer func() {
		if c := broker.Load(); c != nil {
			_ = c.Close()
		}
	}()
	reg := metrics.NewRegistry()
	checks := []httpx.Check{
		httpx.Pending("postgres", &db, (*pgxpool.Pool).Ping),
		httpx.Pending("rabbitmq", &broker, func(c *amqp.Connection, _ context.Context) error { return c.Ready() }),
		httpx.Pending("publishing", &relay, func(r *outbox.Relay, _ context.Context) error { return r.Ready() }),
	}
	srv, err := httpx.Listen(ctx, cfg.HTTPAddr, logger, reg, "starting: not connected to the database and the broker yet", checks...)
	if err != nil {
		return err
	}
	err = srv.Run(ctx, func(ctx context.Context) (func(context.Context) error, error) {
		pool, err := pg.WaitPool(ctx, cfg.DatabaseURL, logger, pg.CreatedBy(s.Name+" migrate"), pg.RequireTables("outbox"))
		if err != nil {
			return nil, err
		}
		db.Store(pool)
		topo := Topology(cfg.DeclareQueues)
		conn, err := amqp.DialOptions(ctx, cfg.AMQPURL, topo, logger, amqp.Options{Heartbeat: cfg.Heartbeat})
		if err != nil {
			return nil, err
		}
		broker.Store(conn)
		// One publisher (one channel) per partition led; the relay closes it.
		newPublisher := func() outbox.Publisher { return outbox.AMQPPublisher(amqp.NewPublisher(conn, topo.Exchange)) }
		r, err := outbox.NewRelay(pool, newPublisher, cfg.Relay, logger, reg, outbox.WithBrokerStatus(conn.Ready))
		if err != nil {
			return nil, err
		}
		relay.Store(r)
		srv.Ready(httpx.NewRouter(logger, reg, checks...))
		return r.Run, nil
	})
	logger.InfoContext(ctx, "relay stopped", slog.Any("error", err))
	return err
}

// Topology is what a relay declares (docs/architecture.md, flow step 4). With
// queues (RELAY_DECLARE_QUEUES=true, a user that may do everything): the event
// exchange with its alternate exchange and unroutable queue, the dead-letter
// exchange and every consumer's queue of the contract with its dead-letter
// queue and no retry queue, so an event published before a consumer first
// starts waits in its queue instead of the unroutable one. Without:
// amqp.PublisherTopology, the exchanges only, what the relay's own broker user
// may declare.
func Topology(queues bool) amqp.Topology {
	if !queues {
		return amqp.PublisherTopology()
	}
	var specs []amqp.QueueSpec
	for _, c := range contracts.Consumers() {
		specs = append(specs, amqp.ConsumerQueue(c, nil))
	}
	return amqp.EventTopology(specs...)
}
