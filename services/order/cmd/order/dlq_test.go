package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/dlq"
	"example.com/shop/services/order/migrations"
	"example.com/shop/testkit"
)

// TestDLQReplayDryRunSaysStale: `order dlq replay --dry-run`, run as
// order_maintenance, says stale for stock's answer to an order since cancelled, as
// order's handler would ignore it, naming the order's status and version; an answer
// to an order still placed at the version answered would apply.
func TestDLQReplayDryRunSaysStale(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	testkit.ApplySQLFile(t, "../../../../deploy/postgres/roles.sql")
	pool, dbURL := testkit.NewDatabase(t, migrations.Schema)
	amqpURL := testkit.NewVhost(t)
	consumer, _ := contracts.ConsumerNamed(contracts.ConsumerOrder)
	conn, err := amqp.DialOptions(ctx, amqpURL, amqp.EventTopology(amqp.ConsumerQueue(consumer, []time.Duration{time.Second})),
		nil, amqp.Options{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, err := amqp091.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ch, err := raw.Channel()
	if err != nil {
		t.Fatal(err)
	}
	cancelled, placed := uuid.New(), uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO orders (id, customer_id, status, version, created_at, updated_at) VALUES
		($1, gen_random_uuid(), 'cancelled', 4, now(), now()), ($2, gen_random_uuid(), 'placed', 2, now(), now())`,
		cancelled, placed); err != nil {
		t.Fatal(err)
	}
	answer := func(orderID uuid.UUID) uuid.UUID {
		env, err := contracts.NewEnvelope(contracts.EventStockReservationConfirmed, contracts.ProducerStock, orderID.String(),
			contracts.StockReservationConfirmed{OrderID: orderID, OrderVersion: 2,
				Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "2.000"}}}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		body, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		// As order's consumer dead-letters a copy: through its own exchange, with
		// the origin it read (stock's relay, through app.events).
		headers := amqp091.Table{}
		amqp.Origin{Exchange: contracts.Exchange}.Stamp(headers)
		if err := ch.PublishWithContext(ctx, amqp.CopiesExchange(contracts.QueueOrder), contracts.QueueOrderDLQ, true, false, amqp091.Publishing{
			MessageId: env.EventID.String(), Type: env.EventName, ContentType: "application/json",
			DeliveryMode: amqp091.Persistent, Body: body, Headers: headers,
		}); err != nil {
			t.Fatal(err)
		}
		return env.EventID
	}
	stale, fresh := answer(cancelled), answer(placed)

	var out bytes.Buffer
	vars := env(map[string]string{"ORDER_DATABASE_URL": testkit.URLAs(t, dbURL, "order_maintenance"), "AMQP_URL": amqpURL})
	if err := run(ctx, []string{"order", "dlq", "replay", "--dry-run", "--all"}, vars, &out, io.Discard); err != nil {
		t.Fatalf("dlq replay --dry-run --all: %v\n%s", err, out.String())
	}
	for _, l := range strings.Split(out.String(), "\n") {
		switch {
		case strings.Contains(l, stale.String()) && !strings.Contains(l, "stale: will change nothing (order "+cancelled.String()+" at status cancelled, version 4"):
			t.Errorf("answer to the cancelled order: %q", l)
		case strings.Contains(l, fresh.String()) && !(strings.Contains(l, "would replay") && strings.Contains(l, dlq.VerdictApply)):
			t.Errorf("answer to the placed order: %q", l)
		}
	}
	if !strings.Contains(out.String(), "1 stale") {
		t.Errorf("summary: %q", out.String())
	}
}
