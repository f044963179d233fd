package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/testkit"
)

func TestHandleDeliveryClassifiesErrors(t *testing.T) {
	t.Parallel()
	migrations, err := fs.Sub(testMigrations, "testdata/migrations")
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := testkit.NewDatabase(t, migrations)
	ctx := testkit.Context(t)
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	ib := inbox.New(pool, "c", v, nil, nil)
	ib.Register(contracts.EventOrderPlaced, func(context.Context, pgx.Tx, contracts.Envelope) error { return nil })
	ib.Register(contracts.EventOrderCancelled, func(context.Context, pgx.Tx, contracts.Envelope) error { return boom })

	body := func(name string, edit func(map[string]any)) []byte {
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

	permanent := map[string][]byte{
		"not json":        []byte("{not json"),
		"no event_id":     body(contracts.EventOrderPlaced, func(m map[string]any) { delete(m, "event_id") }),
		"event_id abc":    body(contracts.EventOrderPlaced, func(m map[string]any) { m["event_id"] = "abc" }),
		"event_id v4":     body(contracts.EventOrderPlaced, func(m map[string]any) { m["event_id"] = uuid.NewString() }),
		"unknown event":   body(contracts.EventOrderPlaced, func(m map[string]any) { m["event_name"] = "order.order.lost.v1" }),
		"invalid payload": body(contracts.EventOrderPlaced, func(m map[string]any) { m["payload"].(map[string]any)["lines"] = []any{} }),
	}
	for name, b := range permanent {
		if err := ib.HandleDelivery(ctx, amqp.Delivery{Body: b, Attempt: 1}); !errors.Is(err, amqp.ErrPermanent) {
			t.Errorf("%s: err = %v, want amqp.ErrPermanent", name, err)
		}
	}

	noHandler := inbox.New(pool, "d", v, nil, nil)
	if err := noHandler.HandleDelivery(ctx, amqp.Delivery{Body: body(contracts.EventOrderPlaced, nil)}); !errors.Is(err, amqp.ErrPermanent) || !errors.Is(err, inbox.ErrNoHandler) {
		t.Errorf("no handler: err = %v, want amqp.ErrPermanent and inbox.ErrNoHandler", err)
	}

	var keys int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&keys); err != nil || keys != 0 {
		t.Fatalf("keys after rejected deliveries = %d (%v), want 0", keys, err)
	}

	if err := ib.HandleDelivery(ctx, amqp.Delivery{Body: body(contracts.EventOrderCancelled, nil)}); !errors.Is(err, boom) || errors.Is(err, amqp.ErrPermanent) {
		t.Errorf("handler error: err = %v, want boom and not permanent", err)
	}
	good := body(contracts.EventOrderPlaced, nil)
	for n := range 2 {
		if err := ib.HandleDelivery(ctx, amqp.Delivery{Body: good}); err != nil {
			t.Errorf("good delivery #%d: %v", n+1, err)
		}
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&keys); err != nil || keys != 1 {
		t.Errorf("keys after a good event delivered twice = %d (%v), want 1", keys, err)
	}
}
