package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/stock/internal/events"
	"example.com/shop/services/stock/migrations"
	"example.com/shop/testkit"
)

// The defaults of bin/stock serve (cmd/stock/spec.go), used unless a test says otherwise.
const (
	serviceWorkers = 256 // STOCK_WORKERS
	serviceGroup   = 128 // STOCK_INBOX_GROUP
	serviceTx      = 2   // STOCK_INBOX_TX
)

// testDelays are the retry delays of the test topology: short, so retries come back fast.
var testDelays = []time.Duration{20 * time.Millisecond, 50 * time.Millisecond}

// system is one stock database and one broker vhost holding the stock topology.
type system struct {
	t         testing.TB
	ctx       context.Context
	pool      *pgxpool.Pool
	amqpURL   string
	topo      amqp.Topology
	validator *contracts.Validator
	pub       *amqp.Publisher
	logs      *testkit.Logs // every log line of every consumer, JSON
	logger    *slog.Logger
}

func newSystem(t testing.TB) *system {
	t.Helper()
	ctx := testkit.Context(t)
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	s := &system{
		t: t, ctx: ctx, pool: pool, amqpURL: testkit.NewVhost(t),
		topo: stockTopology(t, testDelays), validator: v,
	}
	var logger *slog.Logger
	logger, s.logs = testkit.Logger(t)
	s.logger = logger.With(slog.String(logging.KeyService, events.Consumer))
	conn := s.dial("publisher")
	s.pub = amqp.NewPublisher(conn, s.topo.Exchange)
	t.Cleanup(func() { _ = s.pub.Close() })
	return s
}

func (s *system) dial(name string) *amqp.Connection {
	s.t.Helper()
	conn, err := amqp.DialOptions(s.ctx, s.amqpURL, s.topo, s.logger, amqp.Options{Name: name})
	if err != nil {
		s.t.Fatalf("dial: %v", err)
	}
	s.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// consumerOptions change one consumer instance.
type consumerOptions struct {
	workers, prefetch, maxAttempts int
	reg                            prometheus.Registerer                   // nil: a registry of its own
	extra                          func(ib *inbox.Inbox)                   // more handlers, registered after the stock ones
	wrap                           func(amqp.HandlerFunc) amqp.HandlerFunc // around HandleDelivery
	conn                           func(*amqp.Connection)                  // receives the consumer's own connection
	inbox                          []inbox.Option                          // for inbox.New
}

// startConsumer runs one stock consumer (own connection, inbox, stock handlers, the
// real amqp runtime) until the test ends.
func (s *system) startConsumer(opt consumerOptions) {
	s.t.Helper()
	conn := s.dial("stock-consumer")
	if opt.conn != nil {
		opt.conn(conn)
	}
	reg := opt.reg
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if opt.workers == 0 {
		opt.workers = serviceWorkers
	}
	if opt.inbox == nil {
		opt.inbox = []inbox.Option{inbox.WithGroupCommit(serviceGroup, serviceTx)}
	}
	ib := inbox.New(s.pool, events.Consumer, s.validator, s.logger, reg, opt.inbox...)
	events.Register(ib, outbox.NewWriter(s.validator, contracts.ProducerStock), s.logger)
	if opt.extra != nil {
		opt.extra(ib)
	}
	var h amqp.HandlerFunc = ib.HandleDelivery
	if opt.wrap != nil {
		h = opt.wrap(h)
	}
	c, err := amqp.NewConsumer(conn, amqp.ConsumerConfig{
		Queue: contracts.QueueStock, DeadLetterQueue: contracts.QueueStockDLQ, Name: events.Consumer,
		Workers: opt.workers, Prefetch: opt.prefetch, MaxAttempts: opt.maxAttempts,
		RetryDelays: testDelays,
	}, h, s.logger, reg)
	if err != nil {
		s.t.Fatalf("new consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx) // returns ErrClosed when a test kills the connection
	}()
	s.t.Cleanup(func() { cancel(); <-done })
}

// placed returns a valid order.order.placed.v1 envelope with lines lines.
func (s *system) placed(lines int) (contracts.Envelope, contracts.OrderPlaced) {
	s.t.Helper()
	p := contracts.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2}
	for n := range lines {
		p.Lines = append(p.Lines, contracts.OrderLine{ProductID: uuid.New(), Quantity: fmt.Sprintf("%d.250", n+1)})
	}
	return s.envelope(contracts.EventOrderPlaced, p), p
}

func (s *system) cancelled(p contracts.OrderPlaced, version int) contracts.Envelope {
	s.t.Helper()
	return s.envelope(contracts.EventOrderCancelled, contracts.OrderCancelled{
		OrderID: p.OrderID, CustomerID: p.CustomerID, Lines: p.Lines, Version: version,
	})
}

func (s *system) envelope(name string, payload any) contracts.Envelope {
	s.t.Helper()
	env, err := contracts.NewEnvelope(name, contracts.ProducerOrder, "corr-"+uuid.NewString(), payload, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	return env
}

// message is env as the relay publishes it.
func message(t testing.TB, env contracts.Envelope) amqp.Message {
	t.Helper()
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return amqp.Message{RoutingKey: env.EventName, MessageID: env.EventID.String(), Type: env.EventName, Body: body}
}

// publish publishes msgs to the exchange in one confirmed batch.
func (s *system) publish(msgs ...amqp.Message) {
	s.t.Helper()
	if n, err := s.pub.PublishBatch(s.ctx, msgs, 30*time.Second); err != nil {
		s.t.Fatalf("publish: %d of %d confirmed: %v", n, len(msgs), err)
	}
}

func (s *system) count(query string, args ...any) int {
	s.t.Helper()
	var n int
	if err := s.pool.QueryRow(s.ctx, query, args...).Scan(&n); err != nil {
		s.t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (s *system) keys() int { return s.count(`SELECT count(*) FROM processed_event`) }

func (s *system) reservations(orderID uuid.UUID) int {
	return s.count(`SELECT count(*) FROM reservation WHERE order_id = $1 AND status = 'held'`, orderID)
}

// eventually polls cond until it holds, failing the test after a generous bound (a
// hang guard, not a speed assertion).
func (s *system) eventually(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting until %s\nlogs:\n%s", what, s.logs.Tail(4000))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// queueDepth returns the ready messages in queue.
func (s *system) queueDepth(conn *amqp.Connection, queue string) int {
	s.t.Helper()
	ch, err := conn.Channel(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		s.t.Fatalf("inspect %s: %v", queue, err)
	}
	return q.Messages
}

// drain takes every ready message off queue and returns them.
func (s *system) drain(conn *amqp.Connection, queue string) []amqpMessage {
	s.t.Helper()
	ch, err := conn.Channel(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	defer ch.Close()
	var out []amqpMessage
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			s.t.Fatalf("get %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, amqpMessage{Body: d.Body, MessageID: d.MessageId, Headers: d.Headers})
	}
}

type amqpMessage struct {
	Body      []byte
	MessageID string
	Headers   map[string]any
}

// metric sums the values of the counters named name in reg.
func metric(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

var errHook = errors.New("test hook failure")

// stockTopology is the topology bin/stock serve declares, with delays as its retry
// delays.
func stockTopology(t testing.TB, delays []time.Duration) amqp.Topology {
	t.Helper()
	c, ok := contracts.ConsumerNamed(events.Consumer)
	if !ok {
		t.Fatalf("no consumer %s in the contract", events.Consumer)
	}
	return amqp.EventTopology(amqp.ConsumerQueue(c, delays))
}
