package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/testkit"
)

// newDeliveryDB returns a database with the inbox's migrations and a
// contract validator.
func newDeliveryDB(t *testing.T) (*pgxpool.Pool, *contracts.Validator) {
	t.Helper()
	pool, _ := testkit.NewDatabase(t, testSchema)
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	return pool, v
}

// eventBody is the JSON of a valid envelope of event name (an order.order.placed.v1
// payload), changed by edit when it is not nil.
func eventBody(t *testing.T, name string, edit func(map[string]any)) []byte {
	t.Helper()
	env, err := contracts.NewEnvelope(name, contracts.ProducerOrder, "corr", contracts.OrderPlaced{
		OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2,
		Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "2.000"}},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if edit == nil {
		return b
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHandleDeliveryClassifiesErrors(t *testing.T) {
	t.Parallel()
	pool, v := newDeliveryDB(t)
	ctx := testkit.Context(t)
	boom := errors.New("boom")
	ib := inbox.New(pool, "c", v, nil, nil)
	inbox.On(ib, contracts.EventOrderPlaced, func(context.Context, pgx.Tx, inbox.Meta, contracts.OrderPlaced) error { return nil })
	inbox.On(ib, contracts.EventOrderCancelled, func(context.Context, pgx.Tx, inbox.Meta, contracts.OrderCancelled) error { return boom })

	permanent := map[string][]byte{
		"not json":        []byte("{not json"),
		"no event_id":     eventBody(t, contracts.EventOrderPlaced, func(m map[string]any) { delete(m, "event_id") }),
		"event_id abc":    eventBody(t, contracts.EventOrderPlaced, func(m map[string]any) { m["event_id"] = "abc" }),
		"event_id v4":     eventBody(t, contracts.EventOrderPlaced, func(m map[string]any) { m["event_id"] = uuid.NewString() }),
		"unknown event":   eventBody(t, contracts.EventOrderPlaced, func(m map[string]any) { m["event_name"] = "order.order.lost.v1" }),
		"invalid payload": eventBody(t, contracts.EventOrderPlaced, func(m map[string]any) { m["payload"].(map[string]any)["lines"] = []any{} }),
	}
	for name, b := range permanent {
		if err := ib.HandleDelivery(ctx, amqp.Delivery{Body: b, Attempt: 1}); !errors.Is(err, amqp.ErrPermanent) {
			t.Errorf("%s: err = %v, want amqp.ErrPermanent", name, err)
		}
	}

	good := eventBody(t, contracts.EventOrderPlaced, nil)
	var goodEnv contracts.Envelope
	if err := json.Unmarshal(good, &goodEnv); err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]amqp.Delivery{
		"content_type text/plain":     {Body: good, ContentType: "text/plain"},
		"content_type bad":            {Body: good, ContentType: ";;"},
		"message_id of another event": {Body: good, MessageID: uuid.Must(uuid.NewV7()).String()},
		"message_id not a UUID":       {Body: good, MessageID: "order-1"},
		"type of another event":       {Body: good, Type: contracts.EventOrderCancelled},
	} {
		err := ib.HandleDelivery(ctx, d)
		if !errors.Is(err, amqp.ErrPermanent) || !strings.Contains(err.Error(), strings.Fields(name)[0]) {
			t.Errorf("%s: err = %v, want amqp.ErrPermanent naming %s", name, err, strings.Fields(name)[0])
		}
	}

	noHandler := inbox.New(pool, "d", v, nil, nil)
	if err := noHandler.HandleDelivery(ctx, amqp.Delivery{Body: eventBody(t, contracts.EventOrderPlaced, nil)}); !errors.Is(err, amqp.ErrPermanent) || !errors.Is(err, inbox.ErrNoHandler) {
		t.Errorf("no handler: err = %v, want amqp.ErrPermanent and inbox.ErrNoHandler", err)
	}

	// A database that refuses connections is not the event's fault.
	down, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	unreachable := inbox.New(down, "c", v, nil, nil)
	inbox.On(unreachable, contracts.EventOrderPlaced, func(context.Context, pgx.Tx, inbox.Meta, contracts.OrderPlaced) error { return nil })
	if err := unreachable.HandleDelivery(ctx, amqp.Delivery{Body: good}); !errors.Is(err, amqp.ErrUnavailable) || errors.Is(err, amqp.ErrPermanent) {
		t.Errorf("database down: err = %v, want amqp.ErrUnavailable", err)
	}

	var keys int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&keys); err != nil || keys != 0 {
		t.Fatalf("keys after rejected deliveries = %d (%v), want 0", keys, err)
	}

	if err := ib.HandleDelivery(ctx, amqp.Delivery{Body: eventBody(t, contracts.EventOrderCancelled, nil)}); !errors.Is(err, boom) || errors.Is(err, amqp.ErrPermanent) {
		t.Errorf("handler error: err = %v, want boom and not permanent", err)
	}
	for n, d := range []amqp.Delivery{
		{Body: good, MessageID: goodEnv.EventID.String(), ContentType: "application/json", Type: contracts.EventOrderPlaced},
		{Body: good, ContentType: "application/json; charset=utf-8", MessageID: strings.ToUpper(goodEnv.EventID.String())},
	} {
		if err := ib.HandleDelivery(ctx, d); err != nil {
			t.Errorf("good delivery #%d: %v", n+1, err)
		}
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&keys); err != nil || keys != 1 {
		t.Errorf("keys after a good event delivered twice = %d (%v), want 1", keys, err)
	}
}

// TestHandleDeliveryLeavesTheLogToTheRuntime: a failing event is not logged by the
// inbox; its error names the event through its log attributes, so the consumer
// runtime logs it once with its event_id. A handler's inbox.ErrPermanent
// dead-letters the delivery (amqp.ErrPermanent) without the handler knowing the
// broker.
func TestHandleDeliveryLeavesTheLogToTheRuntime(t *testing.T) {
	t.Parallel()
	pool, v := newDeliveryDB(t)
	ctx := testkit.Context(t)
	logger, logs := testkit.Logger(t)
	ib := inbox.New(pool, "c", v, logger, nil)
	inbox.On(ib, contracts.EventOrderPlaced, func(context.Context, pgx.Tx, inbox.Meta, contracts.OrderPlaced) error {
		return fmt.Errorf("decode: %w", inbox.ErrPermanent)
	})
	inbox.On(ib, contracts.EventOrderCancelled, func(context.Context, pgx.Tx, inbox.Meta, contracts.OrderCancelled) error { return errors.New("boom") })
	for _, tt := range []struct {
		name      string
		permanent bool
	}{{contracts.EventOrderPlaced, true}, {contracts.EventOrderCancelled, false}} {
		env, err := contracts.NewEnvelope(tt.name, contracts.ProducerOrder, "corr-1", contracts.OrderPlaced{
			OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2,
			Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "2.000"}},
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		err = ib.HandleDelivery(ctx, amqp.Delivery{Body: b, MessageID: env.EventID.String(), Attempt: 1})
		if err == nil || errors.Is(err, amqp.ErrPermanent) != tt.permanent {
			t.Errorf("%s: err = %v, want permanent %v", tt.name, err, tt.permanent)
		}
		got := map[string]string{}
		for _, a := range logging.ErrorAttrs(err) {
			got[a.Key] = a.Value.String()
		}
		if got["event_id"] != env.EventID.String() || got["event_name"] != tt.name || got["correlation_id"] != "corr-1" {
			t.Errorf("%s: error attributes = %v, want the event's", tt.name, got)
		}
	}
	if l := logs.String(); strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
		t.Errorf("the inbox logged a failure itself:\n%s", l)
	}
}

// A database that does not answer (here: processed_event locked by another
// transaction) is an outage within the Inbox's timeout: the delivery wraps
// amqp.ErrUnavailable instead of waiting as long as the database does.
func TestHandleDeliveryGivesUpOnADatabaseThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	pool, v := newDeliveryDB(t)
	ctx := testkit.Context(t)
	ib := inbox.New(pool, "c", v, nil, nil, inbox.WithTimeout(300*time.Millisecond))
	inbox.On(ib, contracts.EventOrderPlaced, func(context.Context, pgx.Tx, inbox.Meta, contracts.OrderPlaced) error { return nil })

	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE processed_event IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = ib.HandleDelivery(ctx, amqp.Delivery{Body: eventBody(t, contracts.EventOrderPlaced, nil)})
	if !errors.Is(err, amqp.ErrUnavailable) || errors.Is(err, amqp.ErrPermanent) {
		t.Fatalf("got %v, want an error wrapping amqp.ErrUnavailable", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("HandleDelivery took %v with a 300ms timeout", took)
	}
}
