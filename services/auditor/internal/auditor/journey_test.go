package auditor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/auditor"
)

func TestJourneyFollowsAnOrderThroughEveryTable(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	order := w.newOrder(t, t0)
	placedEv := w.event(t, order, contracts.EventOrderPlaced, 2, t0.Add(time.Second), ptr(t0.Add(time.Second+10*time.Millisecond)))
	cancelledEv := w.event(t, order, contracts.EventOrderCancelled, 3, t0.Add(2*time.Second), ptr(t0.Add(2*time.Second+10*time.Millisecond)))
	for _, c := range []string{contracts.ConsumerStock, contracts.ConsumerShipping} {
		w.process(t, c, placedEv, t0.Add(time.Second+30*time.Millisecond))
	}
	w.process(t, contracts.ConsumerShipping, cancelledEv, t0.Add(2*time.Second+30*time.Millisecond))
	w.exec(t, w.shipping, `INSERT INTO order_status (order_id, status, version) VALUES ($1, 'cancelled', 3)`, order)
	w.exec(t, w.shipping, `INSERT INTO shipment (id, order_id, status) VALUES ($1, $2, 'cancelled')`, uuid.New(), order)
	w.exec(t, w.stock, `INSERT INTO order_status (order_id, status, version) VALUES ($1, 'placed', 2)`, order)
	// An unrelated order's event in the same time range is not part of the journey.
	other := w.newOrder(t, t0)
	w.event(t, other, contracts.EventOrderPlaced, 2, t0.Add(1500*time.Millisecond), nil)

	j, err := auditor.NewJourneys(w.st, time.Minute).Order(ctx, order)
	if err != nil {
		t.Fatal(err)
	}
	if j.Order.Status != "cancelled" || j.Order.Version != 3 {
		t.Fatalf("order %+v", j.Order)
	}
	var tr []string
	for _, x := range j.Transitions {
		tr = append(tr, x.To)
	}
	if len(tr) != 3 || tr[0] != "draft" || tr[1] != "placed" || tr[2] != "cancelled" || j.Transitions[2].Version != 3 || *j.Transitions[2].EventID != cancelledEv {
		t.Fatalf("transitions %+v", j.Transitions)
	}
	if len(j.Events) != 2 || j.Events[0].EventID != placedEv || j.Events[1].EventID != cancelledEv {
		t.Fatalf("events %+v", j.Events)
	}
	states := map[string]auditor.State{}
	for _, d := range j.Events[1].Deliveries {
		states[d.Consumer] = d.State
	}
	// Stock lacks the cancel, published an hour ago: missing.
	if states[contracts.ConsumerStock] != auditor.StateMissing || states[contracts.ConsumerShipping] != auditor.StateProcessed {
		t.Fatalf("cancel deliveries %+v", j.Events[1].Deliveries)
	}
	if len(j.StateCopies) != 2 || j.StateCopies[0].Version != 2 || j.StateCopies[0].Effect != "0 reservations" ||
		j.StateCopies[1].Status != "cancelled" || j.StateCopies[1].Effect != "shipment cancelled" {
		t.Fatalf("state copies %+v", j.StateCopies)
	}

	ej, err := auditor.NewJourneys(w.st, time.Minute).Event(ctx, placedEv)
	if err != nil {
		t.Fatal(err)
	}
	if len(ej.Events) != 1 || ej.Events[0].EventID != placedEv || ej.Order.ID != order {
		t.Fatalf("event journey %+v", ej)
	}
	for _, d := range ej.Events[0].Deliveries {
		if d.State != auditor.StateProcessed || d.ProcessedAt == nil {
			t.Fatalf("placed deliveries %+v", ej.Events[0].Deliveries)
		}
	}

	if _, err := auditor.NewJourneys(w.st, time.Minute).Order(ctx, uuid.New()); !errors.Is(err, auditor.ErrNotFound) {
		t.Fatalf("unknown order: %v", err)
	}
	if _, err := auditor.NewJourneys(w.st, time.Minute).Event(ctx, uuid.New()); !errors.Is(err, auditor.ErrNotFound) {
		t.Fatalf("unknown event: %v", err)
	}

	rows, err := auditor.NewJourneys(w.st, time.Minute).Board(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("board rows %+v", rows)
	}
	for _, r := range rows {
		if r.OrderID == order && (r.Event != contracts.EventOrderCancelled || r.Placed == nil || r.Published == nil ||
			r.Consumers[contracts.ConsumerStock].State != auditor.StateMissing) {
			t.Fatalf("board row %+v", r)
		}
		if r.OrderID == other && (r.Published != nil || r.Consumers[contracts.ConsumerStock].State != auditor.StateNotPublished) {
			t.Fatalf("board row of the unpublished order %+v", r)
		}
	}
}
