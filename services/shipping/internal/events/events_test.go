package events_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
	"example.com/shop/services/shipping/internal/events"
	"example.com/shop/services/shipping/internal/shipping"
	"example.com/shop/services/shipping/internal/store"
	"example.com/shop/services/shipping/migrations"
	"example.com/shop/testkit"
)

// waitFor bounds every wait on the broker; it is a safety net, not a speed goal.
const waitFor = 30 * time.Second

// handled is the outcome of one delivery, reported by the test's wrapper
// around inbox.HandleDelivery.
type handled struct {
	messageID string
	err       error
}

// testTopology is the shipping topology (amqp.EventTopology) under unique
// names on the test broker, so tests run in parallel without a vhost each; it
// is deleted when the test ends.
func testTopology(t *testing.T) amqp.Topology {
	t.Helper()
	p := testkit.UniqueName(t, "shipping-test")
	topo := amqp.Topology{
		Exchange:           p + ".events",
		AlternateExchange:  p + ".alternate",
		UnroutableQueue:    p + ".unroutable",
		DeadLetterExchange: p + ".dlx",
		Queues: []amqp.QueueSpec{{
			Name:            p + ".shipping",
			DeadLetterQueue: p + ".shipping.dlq",
			RoutingKeys:     shippingEvents(t),
			RetryDelays:     amqp.DefaultRetryDelays(),
		}},
	}
	t.Cleanup(func() {
		conn, err := amqp091.Dial(testkit.AMQPURL(t))
		if err != nil {
			t.Errorf("cleanup: dial: %v", err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("cleanup: channel: %v", err)
			return
		}
		for _, q := range queueNames(topo) {
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
	})
	return topo
}

// queueNames lists the queues of topo: the unroutable queue first, then each
// queue with its dead-letter and retry queues.
func queueNames(topo amqp.Topology) []string {
	return topo.QueueNames()
}

// rig is the real shipping consumer (amqp runtime + inbox + shipping handlers)
// on its own topology and a fresh database.
type rig struct {
	t       *testing.T
	topo    amqp.Topology
	pool    *pgxpool.Pool
	store   *store.Store
	conn    *amqp.Connection
	pub     *amqp.Publisher
	reg     *prometheus.Registry
	handled chan handled
	stop    func()
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := testkit.Context(t)
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	topo := testTopology(t)

	dialCtx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	conn, err := amqp.DialOptions(dialCtx, testkit.AMQPURL(t), topo, logger, amqp.Options{MinBackoff: 5 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	in := inbox.New(pool, events.Consumer, v, logger, reg)
	events.Register(in, logger)

	r := &rig{t: t, topo: topo, pool: pool, store: store.New(pool), conn: conn, reg: reg, handled: make(chan handled, 100)}
	h := func(ctx context.Context, d amqp.Delivery) error {
		err := in.HandleDelivery(ctx, d)
		r.handled <- handled{messageID: d.MessageID, err: err}
		return err
	}
	q := topo.Queues[0]
	c, err := amqp.NewConsumer(conn, amqp.ConsumerConfig{Queue: q.Name, DeadLetterQueue: q.DeadLetterQueue, Name: events.Consumer, RetryDelays: q.RetryDelays}, h, logger, reg)
	if err != nil {
		t.Fatalf("new consumer: %v", err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		stopRun()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("consumer run: %v", err)
			}
		case <-time.After(waitFor):
			t.Errorf("consumer did not stop within %v", waitFor)
		}
	}
	t.Cleanup(r.stop)
	r.pub = amqp.NewPublisher(conn, topo.Exchange)
	t.Cleanup(func() { _ = r.pub.Close() })
	return r
}

// event builds an order event envelope. A zero id or occurredAt means a fresh
// UUID v7 and now.
// shippingEvents are the events the contract binds to shipping's queue.
func shippingEvents(t *testing.T) []string {
	t.Helper()
	c, ok := contracts.ConsumerNamed(contracts.ConsumerShipping)
	if !ok {
		t.Fatal("the contract has no shipping consumer")
	}
	return c.Events
}

func event(t *testing.T, name string, orderID uuid.UUID, version int, id uuid.UUID, occurredAt time.Time) contracts.Envelope {
	t.Helper()
	if occurredAt.IsZero() {
		occurredAt = time.Now()
	}
	p := contracts.OrderPlaced{
		OrderID:    orderID,
		CustomerID: uuid.New(),
		Lines:      []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "2.000"}},
		Version:    version,
	}
	var payload any = p
	if name == contracts.EventOrderRejected {
		payload = contracts.OrderRejected{OrderID: p.OrderID, CustomerID: p.CustomerID, Lines: p.Lines, Version: version,
			Rejection: contracts.Rejection{Reason: contracts.RejectionInsufficientStock, Lines: []contracts.ShortLine{
				{ProductID: p.Lines[0].ProductID, Requested: "2.000", Available: "1.000"}}}}
	}
	env, err := contracts.NewEnvelope(name, contracts.ProducerOrder, uuid.NewString(), payload, occurredAt)
	if err != nil {
		t.Fatal(err)
	}
	if id != uuid.Nil {
		env.EventID = id
	}
	return env
}

// publish sends env to the exchange with the properties the relay sets and
// waits for the broker's confirm.
func (r *rig) publish(t *testing.T, env contracts.Envelope) {
	t.Helper()
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	msg := amqp.Message{RoutingKey: env.EventName, MessageID: env.EventID.String(), Type: env.EventName, Body: body}
	if _, err := r.pub.PublishBatch(testkit.Context(t), []amqp.Message{msg}, waitFor); err != nil {
		t.Fatalf("publish %s: %v", env.EventName, err)
	}
}

// deliver publishes env and waits until the consumer has handled it, so
// deliveries reach shipping in exactly the order of the calls.
func (r *rig) deliver(t *testing.T, env contracts.Envelope) {
	t.Helper()
	r.publish(t, env)
	r.await(t, env.EventID)
}

// await waits for the handling of the message with id, failing the test if it
// returned an error.
func (r *rig) await(t *testing.T, id uuid.UUID) {
	t.Helper()
	select {
	case h := <-r.handled:
		if h.messageID != id.String() {
			t.Fatalf("handled message %s, want %s", h.messageID, id)
		}
		if h.err != nil {
			t.Fatalf("handling %s: %v", id, h.err)
		}
	case <-time.After(waitFor):
		t.Fatalf("message %s not handled within %v", id, waitFor)
	}
}

// stopAndCheckQueues stops the consumer (unsettled deliveries would go back to
// their queue) and checks that every delivery was acked and routed: the
// shipping queue, its retry queues, its dead-letter queue and the unroutable
// queue are empty.
func (r *rig) stopAndCheckQueues() {
	r.t.Helper()
	r.stop()
	select {
	case h := <-r.handled:
		r.t.Errorf("unexpected extra delivery %s (err %v)", h.messageID, h.err)
	default:
	}
	ch, err := r.conn.Channel(testkit.Context(r.t))
	if err != nil {
		r.t.Fatal(err)
	}
	defer ch.Close()
	for _, q := range queueNames(r.topo) {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			r.t.Fatalf("inspect %s: %v", q, err)
		}
		if st.Messages != 0 {
			r.t.Errorf("queue %s holds %d messages, want 0", q, st.Messages)
		}
	}
}

func (r *rig) wantStatus(t *testing.T, orderID uuid.UUID, status shipping.Status, version int, shipment shipping.ShipmentStatus) {
	t.Helper()
	ctx := testkit.Context(t)
	os, err := r.store.OrderStatus(ctx, orderID)
	if err != nil {
		t.Fatalf("order status: %v", err)
	}
	if os.Status != status || os.Version != version {
		t.Errorf("order status = %s v%d, want %s v%d", os.Status, os.Version, status, version)
	}
	sh, err := r.store.Shipment(ctx, orderID)
	if err != nil {
		t.Fatalf("shipment: %v", err)
	}
	if sh.Status != shipment {
		t.Errorf("shipment = %s, want %s", sh.Status, shipment)
	}
}

func (r *rig) wantProcessed(t *testing.T, ids ...uuid.UUID) {
	t.Helper()
	for _, id := range ids {
		var n int
		err := r.pool.QueryRow(testkit.Context(t),
			`SELECT count(*) FROM processed_event WHERE consumer = $1 AND message_key = $2::text`, events.Consumer, id.String()).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("processed_event has %d keys for event %s, want 1", n, id)
		}
	}
}

// TestOrderEvents runs the acceptance scenarios of docs/architecture.md, rule 4 through the
// real broker, consumer runtime, inbox and handlers. The scenarios share one
// broker and database (each has its own order) and run one after the other,
// each delivery awaited before the next is published, so the delivery order is
// the one written. At the end every delivery must have been acked: nothing
// waits in the queue, its retry queues or its dead-letter queue.
func TestOrderEvents(t *testing.T) {
	t.Parallel()
	r := newRig(t)

	t.Run("cancelled v3 before placed v2: cancelled stays", func(t *testing.T) {
		orderID := uuid.New()
		cancelled := event(t, contracts.EventOrderCancelled, orderID, 3, uuid.Nil, time.Time{})
		placed := event(t, contracts.EventOrderPlaced, orderID, 2, uuid.Nil, time.Time{})

		r.deliver(t, cancelled)
		r.deliver(t, placed)

		r.wantStatus(t, orderID, shipping.StatusCancelled, 3, shipping.ShipmentCancelled)
		r.wantProcessed(t, cancelled.EventID, placed.EventID)
	})

	t.Run("same version twice: the first wins", func(t *testing.T) {
		orderID := uuid.New()
		placed := event(t, contracts.EventOrderPlaced, orderID, 2, uuid.Nil, time.Time{})
		cancelled := event(t, contracts.EventOrderCancelled, orderID, 2, uuid.Nil, time.Time{})

		r.deliver(t, placed)
		r.deliver(t, cancelled)

		r.wantStatus(t, orderID, shipping.StatusPlaced, 2, shipping.ShipmentPending)
		r.wantProcessed(t, placed.EventID, cancelled.EventID)
	})

	t.Run("v5 after v3: the gap is applied", func(t *testing.T) {
		orderID := uuid.New()
		v3 := event(t, contracts.EventOrderPlaced, orderID, 3, uuid.Nil, time.Time{})
		v5 := event(t, contracts.EventOrderCancelled, orderID, 5, uuid.Nil, time.Time{})

		r.deliver(t, v3)
		r.wantStatus(t, orderID, shipping.StatusPlaced, 3, shipping.ShipmentPending)
		r.deliver(t, v5)

		r.wantStatus(t, orderID, shipping.StatusCancelled, 5, shipping.ShipmentCancelled)
		r.wantProcessed(t, v3.EventID, v5.EventID)
	})

	t.Run("stock's answer: pending, then ready, then cancelled", func(t *testing.T) {
		orderID := uuid.New()
		placed := event(t, contracts.EventOrderPlaced, orderID, 2, uuid.Nil, time.Time{})
		confirmed := event(t, contracts.EventOrderConfirmed, orderID, 3, uuid.Nil, time.Time{})
		cancelled := event(t, contracts.EventOrderCancelled, orderID, 4, uuid.Nil, time.Time{})

		r.deliver(t, placed)
		r.wantStatus(t, orderID, shipping.StatusPlaced, 2, shipping.ShipmentPending)
		r.deliver(t, confirmed)
		r.wantStatus(t, orderID, shipping.StatusConfirmed, 3, shipping.ShipmentReady)
		r.deliver(t, cancelled)
		r.wantStatus(t, orderID, shipping.StatusCancelled, 4, shipping.ShipmentCancelled)
	})

	t.Run("confirmed before its placed: the version decides", func(t *testing.T) {
		orderID := uuid.New()
		placed := event(t, contracts.EventOrderPlaced, orderID, 2, uuid.Nil, time.Time{})
		confirmed := event(t, contracts.EventOrderConfirmed, orderID, 3, uuid.Nil, time.Time{})

		r.deliver(t, confirmed)
		r.deliver(t, placed)
		r.wantStatus(t, orderID, shipping.StatusConfirmed, 3, shipping.ShipmentReady)
		r.wantProcessed(t, confirmed.EventID, placed.EventID)
	})

	t.Run("rejected: the shipment is cancelled", func(t *testing.T) {
		orderID := uuid.New()
		rejected := event(t, contracts.EventOrderRejected, orderID, 3, uuid.Nil, time.Time{})
		placed := event(t, contracts.EventOrderPlaced, orderID, 2, uuid.Nil, time.Time{})

		r.deliver(t, rejected)
		r.deliver(t, placed)
		r.wantStatus(t, orderID, shipping.StatusRejected, 3, shipping.ShipmentCancelled)
	})

	t.Run("v2 with no row yet: inserted", func(t *testing.T) {
		orderID := uuid.New()
		v2 := event(t, contracts.EventOrderPlaced, orderID, 2, uuid.Nil, time.Time{})

		r.deliver(t, v2)

		r.wantStatus(t, orderID, shipping.StatusPlaced, 2, shipping.ShipmentPending)
		r.wantProcessed(t, v2.EventID)
	})

	t.Run("duplicate of one event: one effect", func(t *testing.T) {
		orderID := uuid.New()
		placed := event(t, contracts.EventOrderPlaced, orderID, 2, uuid.Nil, time.Time{})
		dupsBefore := counterValue(t, r.reg, "inbox_duplicates_total")

		r.deliver(t, placed)
		before, err := r.store.Shipment(testkit.Context(t), orderID)
		if err != nil {
			t.Fatal(err)
		}
		r.deliver(t, placed)

		r.wantStatus(t, orderID, shipping.StatusPlaced, 2, shipping.ShipmentPending)
		after, err := r.store.Shipment(testkit.Context(t), orderID)
		if err != nil {
			t.Fatal(err)
		}
		if after != before {
			t.Errorf("shipment changed by the duplicate: %+v, then %+v", before, after)
		}
		r.wantProcessed(t, placed.EventID)
		if got := counterValue(t, r.reg, "inbox_duplicates_total") - dupsBefore; got != 1 {
			t.Errorf("inbox_duplicates_total grew by %v, want 1", got)
		}
	})

	// The newer version carries the older occurred_at and the smaller event id
	// and is delivered first: ordering by arrival, by occurred_at or by event
	// id would all end at the older version.
	t.Run("only the payload version decides", func(t *testing.T) {
		orderID := uuid.New()
		small, large := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
		if bytes.Compare(small[:], large[:]) > 0 {
			small, large = large, small
		}
		if bytes.Equal(small[:], large[:]) {
			t.Fatalf("equal ids %s", small)
		}
		newer := event(t, contracts.EventOrderCancelled, orderID, 4, small, time.Now().Add(-time.Hour))
		older := event(t, contracts.EventOrderPlaced, orderID, 3, large, time.Now())

		r.deliver(t, newer)
		r.deliver(t, older)

		r.wantStatus(t, orderID, shipping.StatusCancelled, 4, shipping.ShipmentCancelled)
		r.wantProcessed(t, newer.EventID, older.EventID)
	})

	r.stopAndCheckQueues()
}

// TestInvalidEventIsDeadLettered checks the other side of the acks above: an
// event that breaks the contract is not acked away but goes to the DLQ at once.
func TestInvalidEventIsDeadLettered(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	bad := event(t, contracts.EventOrderPlaced, uuid.New(), 0, uuid.Nil, time.Time{}) // version 0 breaks the schema
	r.publish(t, bad)
	select {
	case h := <-r.handled:
		if !errors.Is(h.err, amqp.ErrPermanent) {
			t.Errorf("handling an invalid event: err = %v, want ErrPermanent", h.err)
		}
	case <-time.After(waitFor):
		t.Fatalf("invalid event not handled within %v", waitFor)
	}
	r.stop()
	ch, err := r.conn.Channel(testkit.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var d amqp091.Delivery
	deadline := time.Now().Add(waitFor)
	for {
		var ok bool
		d, ok, err = ch.Get(r.topo.Queues[0].DeadLetterQueue, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok || time.Now().After(deadline) {
			if !ok {
				t.Fatalf("nothing in %s", r.topo.Queues[0].DeadLetterQueue)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d.MessageId != bad.EventID.String() {
		t.Errorf("dead-lettered message %s, want %s", d.MessageId, bad.EventID)
	}
	var n int
	if err := r.pool.QueryRow(testkit.Context(t), `SELECT count(*) FROM processed_event`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("processed_event has %d keys, want 0", n)
	}
}

// counterValue returns the value of the single counter series named name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no single series %s in the registry", name)
	return 0
}
