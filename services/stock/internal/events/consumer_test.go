package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
)

// Every test here goes through the real broker and database: events are published to
// the exchange, the amqp consumer runtime delivers them to the inbox, which runs the
// stock handlers.

func TestSameEnvelopeTwiceReservesOnce(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	reg := prometheus.NewRegistry()
	s.startConsumer(consumerOptions{reg: reg})

	env, p := s.placed(3)
	s.publish(message(t, env))
	s.publish(message(t, env))

	s.eventually("both deliveries are acked", func() bool { return metric(t, reg, "amqp_consumer_processed_total") == 2 })
	if got := s.reservations(p.OrderID); got != 3 {
		t.Errorf("reservations = %d, want 3 (one per line)", got)
	}
	if got := s.keys(); got != 1 {
		t.Errorf("processed_event rows = %d, want 1", got)
	}
	if got := metric(t, reg, "inbox_duplicates_total"); got != 1 {
		t.Errorf("inbox_duplicates_total = %v, want 1", got)
	}
	var quantities []string
	rows, err := s.pool.Query(s.ctx, `SELECT quantity::text FROM reservation WHERE order_id = $1 ORDER BY line_no`, p.OrderID)
	if err != nil {
		t.Fatal(err)
	}
	quantities, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(quantities, " ") != "1.250 2.250 3.250" {
		t.Errorf("quantities = %v, want the ordered ones exactly", quantities)
	}
}

func TestHandlerFailsOnceThenTheRetrySucceeds(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var calls atomic.Int32
	failed, resume := make(chan struct{}), make(chan struct{})
	var attempts []int
	var mu sync.Mutex
	s.startConsumer(consumerOptions{
		// Registered after the stock handler: its failure rolls back the reservations
		// the stock handler has just written, and the key with them.
		extra: func(ib *inbox.Inbox) {
			inbox.On(ib, contracts.EventOrderPlaced, func(context.Context, pgx.Tx, inbox.Meta, contracts.OrderPlaced) error {
				if calls.Add(1) == 1 {
					return errHook
				}
				return nil
			})
		},
		wrap: func(next amqp.HandlerFunc) amqp.HandlerFunc {
			return func(ctx context.Context, d amqp.Delivery) error {
				err := next(ctx, d)
				mu.Lock()
				attempts = append(attempts, d.Attempt)
				mu.Unlock()
				if errors.Is(err, errHook) {
					// The transaction is over; hold the runtime until the test has looked.
					close(failed)
					<-resume
				}
				return err
			}
		},
	})

	env, p := s.placed(2)
	s.publish(message(t, env))

	<-failed
	if k, r := s.keys(), s.reservations(p.OrderID); k != 0 || r != 0 {
		t.Errorf("after the failure: processed_event = %d, reservations = %d; want 0, 0", k, r)
	}
	close(resume)

	s.eventually("the retry is processed", func() bool { return s.keys() == 1 })
	if got := s.reservations(p.OrderID); got != 2 {
		t.Errorf("reservations = %d, want 2", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 {
		t.Errorf("delivery attempts = %v, want [1 2]", attempts)
	}
}

func TestEightConsumersRaceOverRepeatedMessages(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]inbox.Option{
		"group commit":         {inbox.WithGroupCommit(serviceGroup, serviceTx)},
		"one transaction each": {inbox.WithGroupCommit(1, 1)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testEightConsumersRace(t, opts)
		})
	}
}

func testEightConsumersRace(t *testing.T, opts []inbox.Option) {
	s := newSystem(t)
	const consumers, events, copies = 8, 60, 3
	reg := prometheus.NewRegistry() // shared: the counters add up over the instances
	for range consumers {
		s.startConsumer(consumerOptions{reg: reg, inbox: opts, workers: 8})
	}

	orders := make([]contracts.OrderPlaced, events)
	msgs := make([]amqp.Message, events)
	for n := range events {
		var env contracts.Envelope
		env, orders[n] = s.placed(2)
		msgs[n] = message(t, env)
	}
	for range copies {
		s.publish(msgs...)
	}

	s.eventually("every copy is acked", func() bool {
		return metric(t, reg, "amqp_consumer_processed_total") == events*copies
	})
	for _, p := range orders {
		if got := s.reservations(p.OrderID); got != 2 {
			t.Errorf("order %s: reservations = %d, want 2", p.OrderID, got)
		}
	}
	if got := s.keys(); got != events {
		t.Errorf("processed_event rows = %d, want %d", got, events)
	}
	if got := metric(t, reg, "inbox_processed_total"); got != events {
		t.Errorf("inbox_processed_total = %v, want %d", got, events)
	}
	if got := metric(t, reg, "inbox_duplicates_total"); got != events*(copies-1) {
		t.Errorf("inbox_duplicates_total = %v, want %d", got, events*(copies-1))
	}
	if got := metric(t, reg, "amqp_consumer_failures_total"); got != 0 {
		t.Errorf("amqp_consumer_failures_total = %v, want 0", got)
	}
	logs := s.logs.String()
	if strings.Contains(logs, "25P02") || strings.Contains(logs, "current transaction is aborted") {
		t.Errorf("a transaction was aborted (SQLSTATE 25P02):\n%s", logs)
	}
}

func TestKilledAfterCommitBeforeAckTheRedeliveryIsADuplicate(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var conn *amqp.Connection
	killed := make(chan struct{})
	var once sync.Once
	s.startConsumer(consumerOptions{
		conn: func(c *amqp.Connection) { conn = c },
		wrap: func(next amqp.HandlerFunc) amqp.HandlerFunc {
			return func(ctx context.Context, d amqp.Delivery) error {
				err := next(ctx, d)
				if err == nil {
					// Committed; now the process "dies": its connection goes away
					// before the runtime can ack, so the broker keeps the message.
					once.Do(func() {
						_ = conn.Close()
						close(killed)
					})
				}
				return err
			}
		},
	})

	env, p := s.placed(2)
	s.publish(message(t, env))
	<-killed
	if k, r := s.keys(), s.reservations(p.OrderID); k != 1 || r != 2 {
		t.Fatalf("after the commit: processed_event = %d, reservations = %d; want 1, 2", k, r)
	}

	// The replacement instance gets the unacked message again.
	reg := prometheus.NewRegistry()
	var redelivered atomic.Bool
	s.startConsumer(consumerOptions{reg: reg, wrap: func(next amqp.HandlerFunc) amqp.HandlerFunc {
		return func(ctx context.Context, d amqp.Delivery) error {
			redelivered.Store(d.Redelivered)
			return next(ctx, d)
		}
	}})
	s.eventually("the redelivery is acked", func() bool { return metric(t, reg, "amqp_consumer_processed_total") == 1 })
	if got := metric(t, reg, "inbox_duplicates_total"); got != 1 {
		t.Errorf("inbox_duplicates_total = %v, want 1", got)
	}
	if !redelivered.Load() {
		t.Error("the second delivery was not flagged redelivered")
	}
	if k, r := s.keys(), s.reservations(p.OrderID); k != 1 || r != 2 {
		t.Errorf("in the end: processed_event = %d, reservations = %d; want 1, 2", k, r)
	}
}

func TestPoisonMessagesAreDeadLetteredOnFirstDelivery(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var mu sync.Mutex
	deliveries := map[string]int{} // body -> deliveries
	reg := prometheus.NewRegistry()
	s.startConsumer(consumerOptions{reg: reg, maxAttempts: 5, wrap: func(next amqp.HandlerFunc) amqp.HandlerFunc {
		return func(ctx context.Context, d amqp.Delivery) error {
			mu.Lock()
			deliveries[string(d.Body)]++
			mu.Unlock()
			return next(ctx, d)
		}
	}})

	edit := func(f func(m map[string]any)) []byte {
		env, _ := s.placed(1)
		m := map[string]any{}
		if err := json.Unmarshal(message(t, env).Body, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	poison := [][]byte{
		[]byte("{not json"),
		edit(func(m map[string]any) { delete(m, "event_id") }),
		edit(func(m map[string]any) { m["event_id"] = "abc" }),
		edit(func(m map[string]any) { m["event_name"] = "order.order.teleported.v1" }),
		edit(func(m map[string]any) {
			m["payload"].(map[string]any)["lines"].([]any)[0].(map[string]any)["quantity"] = "-1"
		}),
	}
	var msgs []amqp.Message
	for n, b := range poison {
		msgs = append(msgs, amqp.Message{
			RoutingKey: contracts.EventOrderPlaced, Type: contracts.EventOrderPlaced,
			MessageID: "poison-" + string(rune('a'+n)), Body: b,
		})
	}
	good, p := s.placed(1)
	msgs = append(msgs, message(t, good))
	s.publish(msgs...)

	conn := s.dial("inspector")
	s.eventually("the poison is in the DLQ and the good event processed", func() bool {
		return s.queueDepth(conn, contracts.QueueStockDLQ) == len(poison) && s.keys() == 1
	})
	dead := s.drain(conn, contracts.QueueStockDLQ)
	var got, want []string
	for _, m := range dead {
		got = append(got, string(m.Body))
	}
	for _, b := range poison {
		want = append(want, string(b))
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("DLQ bodies = %q, want the poison bodies intact %q", got, want)
	}
	mu.Lock()
	for _, b := range poison {
		if n := deliveries[string(b)]; n != 1 {
			t.Errorf("poison %q delivered %d times, want 1", b, n)
		}
	}
	mu.Unlock()
	if got := s.count(`SELECT count(*) FROM processed_event WHERE message_key <> $1::text`, good.EventID.String()); got != 0 {
		t.Errorf("processed_event rows of poison = %d, want 0", got)
	}
	if got := s.reservations(p.OrderID); got != 1 {
		t.Errorf("reservations of the good event = %d, want 1", got)
	}
	if got := metric(t, reg, "inbox_failures_total"); got != float64(len(poison)) {
		t.Errorf("inbox_failures_total = %v, want %d", got, len(poison))
	}
}

func TestAlwaysFailingHandlerIsDeadLetteredAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	const maxAttempts = 4
	var mu sync.Mutex
	var attempts []int
	s.startConsumer(consumerOptions{
		maxAttempts: maxAttempts,
		extra: func(ib *inbox.Inbox) {
			inbox.On(ib, contracts.EventOrderPlaced, func(context.Context, pgx.Tx, inbox.Meta, contracts.OrderPlaced) error { return errHook })
		},
		wrap: func(next amqp.HandlerFunc) amqp.HandlerFunc {
			return func(ctx context.Context, d amqp.Delivery) error {
				mu.Lock()
				attempts = append(attempts, d.Attempt)
				mu.Unlock()
				return next(ctx, d)
			}
		},
	})

	env, p := s.placed(2)
	msg := message(t, env)
	s.publish(msg)

	conn := s.dial("inspector")
	s.eventually("the event is in the DLQ", func() bool { return s.queueDepth(conn, contracts.QueueStockDLQ) == 1 })
	dead := s.drain(conn, contracts.QueueStockDLQ)
	if len(dead) != 1 || string(dead[0].Body) != string(msg.Body) || dead[0].MessageID != msg.MessageID {
		t.Errorf("DLQ holds %d messages; want the envelope intact with message_id %s", len(dead), msg.MessageID)
	}
	mu.Lock()
	if len(attempts) != maxAttempts || attempts[0] != 1 || attempts[maxAttempts-1] != maxAttempts {
		t.Errorf("delivery attempts = %v, want 1..%d", attempts, maxAttempts)
	}
	mu.Unlock()
	if k, r := s.keys(), s.reservations(p.OrderID); k != 0 || r != 0 {
		t.Errorf("processed_event = %d, reservations = %d; want 0, 0", k, r)
	}
}

func TestCancelledReleasesReservations(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.startConsumer(consumerOptions{})

	env, p := s.placed(3)
	s.publish(message(t, env))
	s.eventually("the order is reserved", func() bool { return s.reservations(p.OrderID) == 3 })

	s.publish(message(t, s.cancelled(p, 3)))
	s.eventually("the reservations are released", func() bool { return s.reservations(p.OrderID) == 0 })
	if got := s.keys(); got != 2 {
		t.Errorf("processed_event rows = %d, want 2", got)
	}
}

func TestPlacedArrivingAfterItsCancelReservesNothing(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.startConsumer(consumerOptions{})

	env, p := s.placed(2) // version 2
	s.publish(message(t, s.cancelled(p, 3)))
	s.eventually("the cancel is processed", func() bool { return s.keys() == 1 })
	s.publish(message(t, env))
	s.eventually("the late placed event is processed", func() bool { return s.keys() == 2 })
	if got := s.reservations(p.OrderID); got != 0 {
		t.Errorf("reservations = %d, want 0: the order was cancelled after this version", got)
	}
}
