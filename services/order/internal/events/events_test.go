package events_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/services/order/internal/events"
	"example.com/shop/services/order/internal/order"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// TestOutbox: each transition's event maps to its contract event, whose payload
// carries the order's version after the transition and passes its schema.
func TestOutbox(t *testing.T) {
	t.Parallel()
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	q, err := order.ParseQuantity("2")
	if err != nil {
		t.Fatal(err)
	}
	o, err := order.New(uuid.New(), uuid.New(), []order.Line{{ProductID: uuid.New(), Quantity: q}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Place(t0); err != nil {
		t.Fatal(err)
	}
	if err := o.Confirm(2, t0); err != nil {
		t.Fatal(err)
	}
	if err := o.Cancel(t0); err != nil {
		t.Fatal(err)
	}
	r, err := order.New(uuid.New(), uuid.New(), []order.Line{{ProductID: uuid.New(), Quantity: q}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Place(t0); err != nil {
		t.Fatal(err)
	}
	short := order.ShortLine{ProductID: uuid.New(), Requested: q, Available: "0.000"}
	if err := r.Reject(2, order.Rejection{Reason: contracts.RejectionInsufficientStock, Lines: []order.ShortLine{short}}, t0); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name    string
		version int
	}{{contracts.EventOrderPlaced, 2}, {contracts.EventOrderConfirmed, 3}, {contracts.EventOrderCancelled, 4}}
	for n, e := range o.Events() {
		name, payload, err := events.Outbox(e)
		if err != nil || name != want[n].name {
			t.Fatalf("event %d: %q, %v; want %s", n, name, err, want[n].name)
		}
		env, err := contracts.NewEnvelope(name, contracts.ProducerOrder, o.ID().String(), payload, t0)
		if err != nil {
			t.Fatal(err)
		}
		body, err := env.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := v.Decode(body)
		if err != nil {
			t.Fatalf("event %d fails the contract: %v", n, err)
		}
		var p contracts.OrderPlaced
		if err := json.Unmarshal(got.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.OrderID != o.ID() || p.CustomerID != o.CustomerID() || p.Version != want[n].version ||
			len(p.Lines) != 1 || p.Lines[0].Quantity != "2.000" {
			t.Errorf("event %d payload = %+v", n, p)
		}
	}
	name, payload, err := events.Outbox(r.Events()[1])
	if err != nil || name != contracts.EventOrderRejected {
		t.Fatalf("rejected: %q, %v", name, err)
	}
	env, err := contracts.NewEnvelope(name, contracts.ProducerOrder, "c", payload, t0)
	if err != nil {
		t.Fatal(err)
	}
	body, err := env.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Decode(body)
	if err != nil {
		t.Fatalf("rejected fails the contract: %v", err)
	}
	var p contracts.OrderRejected
	if err := json.Unmarshal(got.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Version != 3 || p.Rejection.Reason != contracts.RejectionInsufficientStock || len(p.Rejection.Lines) != 1 ||
		p.Rejection.Lines[0] != (contracts.ShortLine{ProductID: short.ProductID, Requested: "2.000", Available: "0.000"}) {
		t.Errorf("rejected payload = %+v", p)
	}
	if _, _, err := events.Outbox(order.Event{Kind: order.EventRejected}); err == nil {
		t.Error("a rejected event without its rejection mapped to a contract event")
	}
	if _, _, err := events.Outbox(order.Event{Kind: "shipped"}); err == nil {
		t.Error("an unknown kind mapped to a contract event")
	}
}

// Every normalised quantity satisfies the contract: an order that New accepts can always
// be published.
func FuzzOutboxQuantity(f *testing.F) {
	for _, s := range []string{"2", "0.5", "007.25", "999999999.999", "0.000", "1e3"} {
		f.Add(s)
	}
	v, err := contracts.NewValidator()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := order.ParseQuantity(s)
		if err != nil {
			return
		}
		o, err := order.New(uuid.New(), uuid.New(), []order.Line{{ProductID: uuid.New(), Quantity: q}}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Place(t0); err != nil {
			t.Fatal(err)
		}
		name, payload, err := events.Outbox(o.Events()[0])
		if err != nil {
			t.Fatal(err)
		}
		env, err := contracts.NewEnvelope(name, contracts.ProducerOrder, "c", payload, t0)
		if err != nil {
			t.Fatal(err)
		}
		body, err := env.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Validate(body); err != nil {
			t.Fatalf("ParseQuantity(%q) = %q fails the contract: %v", s, q, err)
		}
	})
}
