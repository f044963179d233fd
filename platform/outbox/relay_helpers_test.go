package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/migrate"
	"example.com/shop/testkit"
)

// testSchema is the outbox's own migrations, with the roles of this package's tests.
var testSchema = migrate.Schema{Migrations(Roles{Writer: "test_writer", Relay: "test_relay", Maintenance: "test_maintenance"})}

// newOutboxDB returns a pool on a fresh database with the outbox table.
func newOutboxDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, _ := testkit.NewDatabase(t, testSchema)
	return pool
}

const unroutableKey = "order.order.nobody-listens.v1"

// testTopology declares a private topology whose one queue is bound to
// both order events; it is deleted when the test ends.
func testTopology(t testing.TB) amqp.Topology {
	t.Helper()
	s := testkit.UniqueName(t, "relay")
	q := s + ".q"
	topo := amqp.Topology{
		Exchange:           s + ".events",
		AlternateExchange:  s + ".alternate",
		UnroutableQueue:    s + ".unroutable",
		DeadLetterExchange: s + ".dlx",
		Queues: []amqp.QueueSpec{{
			Name: q, DeadLetterQueue: q + ".dlq",
			RoutingKeys: []string{contracts.EventOrderPlaced, contracts.EventOrderCancelled},
		}},
	}
	t.Cleanup(func() { deleteTopology(t, topo) })
	if err := topo.Declare(rawChannel(t)); err != nil {
		t.Fatalf("declare topology: %v", err)
	}
	return topo
}

func deleteTopology(t testing.TB, topo amqp.Topology) {
	ch := rawChannel(t)
	for _, q := range []string{topo.UnroutableQueue, topo.Queues[0].Name, topo.Queues[0].DeadLetterQueue} {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Errorf("cleanup: delete queue %s: %v", q, err)
			return
		}
	}
	for _, x := range topo.ExchangeNames() {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			t.Errorf("cleanup: delete exchange %s: %v", x, err)
			return
		}
	}
}

// rawChannel is a plain channel on its own connection, closed at cleanup.
func rawChannel(t testing.TB) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(testkit.AMQPURL(t))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	return ch
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// newPublisher dials the broker (declaring topo) and returns a publisher
// to its exchange.
func newPublisher(t testing.TB, topo amqp.Topology) Publisher {
	t.Helper()
	pub, _ := newNamedPublisher(t, topo)
	return pub
}

// newNamedPublisher is newPublisher that also returns the unique
// connection name shown by the broker.
func newNamedPublisher(t testing.TB, topo amqp.Topology) (Publisher, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	name := testkit.UniqueName(t, "relay-publisher")
	conn, err := amqp.DialOptions(ctx, testkit.AMQPURL(t), topo, testLogger(t), amqp.Options{
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Name: name,
	})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	pub := amqp.NewPublisher(conn, topo.Exchange)
	t.Cleanup(func() { _ = pub.Close() })
	return AMQPPublisher(pub), name
}

// fastConfig reacts quickly, for tests.
func fastConfig() RelayConfig {
	return RelayConfig{
		BatchSize:      100,
		PollInterval:   50 * time.Millisecond,
		ConfirmTimeout: 5 * time.Second,
		LockRetry:      50 * time.Millisecond,
		StatsInterval:  50 * time.Millisecond,
		MaxBackoff:     500 * time.Millisecond,
	}
}

type testRelay struct {
	*Relay
	reg *prometheus.Registry
}

// newTestRelay returns a relay publishing every partition it leads
// through pub.
func newTestRelay(t testing.TB, pool *pgxpool.Pool, pub Publisher, cfg RelayConfig) testRelay {
	t.Helper()
	reg := prometheus.NewRegistry()
	r, err := NewRelay(pool, func() Publisher { return pub }, cfg, testLogger(t), reg)
	if err != nil {
		t.Fatalf("new relay: %v", err)
	}
	return testRelay{Relay: r, reg: reg}
}

// hookedPublisher calls before with the size of each batch the relay
// sends, and after with the confirmed count each Wait returns (counted
// from the stream's first message), before the relay marks the rows.
type hookedPublisher struct {
	Publisher
	before func(n int)
	after  func(confirmed int)
}

func (h *hookedPublisher) Stream(ctx context.Context, timeout time.Duration) Stream {
	return hookedStream{h.Publisher.Stream(ctx, timeout), h}
}

type hookedStream struct {
	Stream
	h *hookedPublisher
}

func (s hookedStream) Send(msgs []amqp.Message) {
	if s.h.before != nil {
		s.h.before(len(msgs))
	}
	s.Stream.Send(msgs)
}

func (s hookedStream) Wait(n int) (int, error) {
	confirmed, err := s.Stream.Wait(n)
	if s.h.after != nil {
		s.h.after(confirmed)
	}
	return confirmed, err
}

// oneAtATime publishes each message alone and waits for its confirm
// before the next: the slow baseline that pipelining replaces, for the
// benchmark. The stream's timeout bounds it; when it is spent, Wait
// returns the messages confirmed so far without an error, which ends the
// relay's transaction there.
type oneAtATime struct{ Publisher }

func (o oneAtATime) Stream(ctx context.Context, timeout time.Duration) Stream {
	return &oneStream{pub: o.Publisher, ctx: ctx, deadline: time.Now().Add(timeout)}
}

type oneStream struct {
	pub       Publisher
	ctx       context.Context
	deadline  time.Time
	msgs      []amqp.Message
	confirmed int
}

func (s *oneStream) Send(msgs []amqp.Message) { s.msgs = append(s.msgs, msgs...) }
func (s *oneStream) Close()                   {}

func (s *oneStream) Wait(n int) (int, error) {
	for ; s.confirmed < min(n, len(s.msgs)); s.confirmed++ {
		left := time.Until(s.deadline)
		if left <= 0 {
			return s.confirmed, nil
		}
		one := s.pub.Stream(s.ctx, left)
		one.Send(s.msgs[s.confirmed : s.confirmed+1])
		_, err := one.Wait(1)
		one.Close()
		if err != nil {
			var pe *amqp.PublishError
			if errors.As(err, &pe) {
				pe.Index = s.confirmed
			}
			return s.confirmed, err
		}
	}
	return s.confirmed, nil
}

// start runs r until the returned stop function is called (also at
// cleanup); stop waits for Run to return and fails the test on an error.
func start(t testing.TB, r testRelay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("relay run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("relay did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// eventually polls cond every 10 ms until it holds or 30 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// execer is what insertEvent writes through: a pool, a conn or a tx.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insertEvent writes one outbox row for an order.order.placed.v1 envelope
// with the given correlation id, routed with key, and returns its id. The
// row has no aggregate key: all such rows form one sequence (partition 0).
func insertEvent(t testing.TB, ctx context.Context, db execer, key, correlationID string) string {
	t.Helper()
	env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, correlationID, contracts.OrderPlaced{
		OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2,
		Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "2.000"}},
	}, time.Now())
	if err != nil {
		t.Fatalf("new envelope: %v", err)
	}
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx,
		`INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at) VALUES ($1, $2, $3, $4, $5)`,
		env.EventID, env.EventName, key, string(body), env.OccurredAt); err != nil {
		t.Errorf("insert outbox row: %v", err)
	}
	return env.EventID.String()
}

// consume subscribes to queue with automatic acks; deliveries arrive on the
// returned channel until the test ends.
func consume(t testing.TB, queue string) <-chan amqp091.Delivery {
	t.Helper()
	ch := rawChannel(t)
	d, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume %s: %v", queue, err)
	}
	return d
}

// receive takes n deliveries, failing after 30 s without progress.
func receive(t testing.TB, in <-chan amqp091.Delivery, n int) []amqp091.Delivery {
	t.Helper()
	out := make([]amqp091.Delivery, 0, n)
	for len(out) < n {
		select {
		case d := <-in:
			out = append(out, d)
		case <-time.After(30 * time.Second):
			t.Fatalf("received %d of %d messages", len(out), n)
		}
	}
	return out
}

// drain takes deliveries until none arrives for quiet.
func drain(in <-chan amqp091.Delivery, quiet time.Duration) []amqp091.Delivery {
	var out []amqp091.Delivery
	for {
		select {
		case d := <-in:
			out = append(out, d)
		case <-time.After(quiet):
			return out
		}
	}
}

// outboxState is one row as the tests inspect it.
type outboxState struct {
	Published bool
	Attempts  int
	LastError string
}

func readOutbox(t testing.TB, pool *pgxpool.Pool) map[string]outboxState {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT id::text, published_at IS NOT NULL, attempts, COALESCE(last_error, '') FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]outboxState{}
	for rows.Next() {
		var id string
		var s outboxState
		if err := rows.Scan(&id, &s.Published, &s.Attempts, &s.LastError); err != nil {
			t.Fatal(err)
		}
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func countUnpublished(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// orderedIDs returns every row id in publishing order.
func orderedIDs(t testing.TB, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT id::text FROM outbox ORDER BY occurred_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
