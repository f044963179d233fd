package auditor_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/auditor"
)

func unansweredGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return metricValue(t, reg, "delivery_unanswered_orders")
}

// TestAuditFollowsTheAnswerLeg: stock's answers in its own outbox are audited against
// order's consumer like order's events against stock and shipping, with the progress
// per producer.
func TestAuditFollowsTheAnswerLeg(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, reg := newAudit(t, w, auditor.Config{})
	at := time.Now().Add(-10 * time.Minute)
	order, _ := placed(t, w, 10*time.Minute, contracts.ConsumerStock, contracts.ConsumerShipping)
	answered := w.answer(t, order, contracts.EventStockReservationConfirmed, 2, at.Add(time.Second), ptr(at.Add(time.Second+5*time.Millisecond)))

	r := cycle(t, a)
	if r.Unaccounted[contracts.ConsumerOrder] != 1 || r.UnaccountedTotal != 1 || len(r.Events) != 1 ||
		r.Events[0].EventID != answered || r.Events[0].Producer != contracts.ProducerStock {
		t.Fatalf("report %+v, want stock's answer missing in order", r)
	}
	if r.Producers[contracts.ProducerStock].Audited != 1 || r.Producers[contracts.ProducerOrder].Audited != 1 || r.Audited != 2 {
		t.Fatalf("progress %+v (audited %d), want one event of each producer", r.Producers, r.Audited)
	}
	if g := gauge(t, reg, contracts.ConsumerOrder); g != 1 {
		t.Fatalf("delivery_unaccounted_events{consumer=order} = %v, want 1", g)
	}

	// Order applies the answer: its key, and the order confirmed with its own event.
	w.process(t, contracts.ConsumerOrder, answered, at.Add(2*time.Second))
	confirmed := w.event(t, order, contracts.EventOrderConfirmed, 3, at.Add(2*time.Second), ptr(at.Add(2*time.Second+5*time.Millisecond)))
	w.process(t, contracts.ConsumerShipping, confirmed, at.Add(3*time.Second))
	if r := cycle(t, a); r.UnaccountedTotal != 0 || r.Unanswered != 0 {
		t.Fatalf("after order applied the answer: %+v", r)
	}
}

// TestAuditFlagsAnOrderLeftPlacedWithoutAnswer: an order still placed more than the
// grace after its placed event was published is unanswered; the finding says whether
// an answer waits in stock's outbox; an answer applied (or a cancel) clears it.
func TestAuditFlagsAnOrderLeftPlacedWithoutAnswer(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, reg := newAudit(t, w, auditor.Config{Grace: time.Minute})
	waiting, waitingEv := placed(t, w, 10*time.Minute, contracts.ConsumerStock, contracts.ConsumerShipping)
	placed(t, w, 10*time.Second, contracts.ConsumerStock, contracts.ConsumerShipping) // within the grace
	cancelled, _ := placed(t, w, 9*time.Minute, contracts.ConsumerStock, contracts.ConsumerShipping)
	w.event(t, cancelled, contracts.EventOrderCancelled, 3, time.Now().Add(-8*time.Minute), ptr(time.Now().Add(-8*time.Minute)))

	r := cycle(t, a)
	if r.Unanswered != 1 || len(r.UnansweredOrders) != 1 {
		t.Fatalf("report %+v, want one unanswered order", r)
	}
	u := r.UnansweredOrders[0]
	if u.OrderID != waiting || u.EventID == nil || *u.EventID != waitingEv || u.Version != 2 || u.Answer != nil {
		t.Fatalf("finding %+v, want order %s with no answer", u, waiting)
	}
	if g := unansweredGauge(t, reg); g != 1 {
		t.Fatalf("delivery_unanswered_orders = %v, want 1", g)
	}

	// Stock answered, order has not applied it: the finding names the answer.
	at := time.Now().Add(-5 * time.Minute)
	ans := w.answer(t, waiting, contracts.EventStockReservationRejected, 2, at, ptr(at))
	r = cycle(t, a)
	if r.Unanswered != 1 || r.UnansweredOrders[0].Answer == nil || r.UnansweredOrders[0].Answer.EventID != ans ||
		r.UnansweredOrders[0].Answer.Producer != contracts.ProducerStock {
		t.Fatalf("report %+v, want the order waiting with stock's answer %s", r.UnansweredOrders, ans)
	}

	// Order applies it: rejected, no longer unanswered.
	w.process(t, contracts.ConsumerOrder, ans, time.Now())
	w.event(t, waiting, contracts.EventOrderRejected, 3, time.Now(), nil)
	if r := cycle(t, a); r.Unanswered != 0 || len(r.UnansweredOrders) != 0 {
		t.Fatalf("after the rejection: %+v", r)
	}
	if g := unansweredGauge(t, reg); g != 0 {
		t.Fatalf("delivery_unanswered_orders = %v, want 0", g)
	}
}

// TestJourneyAndBoardShowTheAnswerLeg: stock's answer is an event of the journey (no
// transition of the order), and the board row's answer leg holds it, its delivery to
// order and the order's outcome.
func TestJourneyAndBoardShowTheAnswerLeg(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	order := w.newOrder(t, t0)
	placedEv := w.event(t, order, contracts.EventOrderPlaced, 2, t0.Add(time.Second), ptr(t0.Add(time.Second+10*time.Millisecond)))
	for _, c := range []string{contracts.ConsumerStock, contracts.ConsumerShipping} {
		w.process(t, c, placedEv, t0.Add(time.Second+30*time.Millisecond))
	}
	ans := w.answer(t, order, contracts.EventStockReservationConfirmed, 2, t0.Add(time.Second+30*time.Millisecond), ptr(t0.Add(time.Second+40*time.Millisecond)))
	w.process(t, contracts.ConsumerOrder, ans, t0.Add(time.Second+60*time.Millisecond))
	confirmed := w.event(t, order, contracts.EventOrderConfirmed, 3, t0.Add(time.Second+60*time.Millisecond), ptr(t0.Add(time.Second+70*time.Millisecond)))

	j, err := auditor.NewJourneys(w.st, time.Minute).Order(ctx, order)
	if err != nil {
		t.Fatal(err)
	}
	var tr []string
	for _, x := range j.Transitions {
		tr = append(tr, x.To)
	}
	if len(tr) != 3 || tr[2] != "confirmed" {
		t.Fatalf("transitions %v, want draft, placed, confirmed", tr)
	}
	if len(j.Events) != 3 || j.Events[1].EventID != ans || j.Events[1].Producer != contracts.ProducerStock ||
		len(j.Events[1].Deliveries) != 1 || j.Events[1].Deliveries[0].Consumer != contracts.ConsumerOrder ||
		j.Events[1].Deliveries[0].State != auditor.StateProcessed || j.Events[2].EventID != confirmed {
		t.Fatalf("events %+v, want placed, stock's answer processed by order, confirmed", j.Events)
	}
	for _, c := range j.StateCopies {
		if c.Consumer == contracts.ConsumerOrder {
			t.Fatalf("state copies %+v: order holds the order, not a copy", j.StateCopies)
		}
	}
	if ej, err := auditor.NewJourneys(w.st, time.Minute).Event(ctx, ans); err != nil || len(ej.Events) != 1 || ej.Order.ID != order {
		t.Fatalf("journey of stock's answer: %+v, %v", ej, err)
	}

	rows, err := auditor.NewJourneys(w.st, time.Minute).Board(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("board %+v", rows)
	}
	b := rows[0]
	if b.Event != contracts.EventOrderPlaced || b.Consumers[contracts.ConsumerStock].State != auditor.StateProcessed {
		t.Fatalf("request leg %+v, want the placed event processed by stock", b)
	}
	if b.Answer == nil || b.Answer.EventID != ans || b.Answer.Published == nil ||
		b.Answer.Consumers[contracts.ConsumerOrder].State != auditor.StateProcessed ||
		b.Answer.Outcome != "confirmed" || b.Answer.OutcomeAt == nil {
		t.Fatalf("answer leg %+v", b.Answer)
	}
}

// metricValue returns the value of the gauge name, which has no labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}
