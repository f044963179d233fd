package auditor_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/auditor"
)

// reportJSON returns r as GET /audit serves it.
func reportJSON(t *testing.T, r auditor.Report) map[string]any {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAuditFindsAnUnansweredOrderAfterAPurgeAndARestart: an order placed ten days ago
// and never answered stays unanswered for a fresh auditor (a restart) after its placed
// event was purged from order's outbox; the finding says what is known.
func TestAuditFindsAnUnansweredOrderAfterAPurgeAndARestart(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	stuck, ev := placed(t, w, 10*24*time.Hour, contracts.ConsumerStock, contracts.ConsumerShipping)
	a, _ := newAudit(t, w, auditor.Config{Grace: time.Minute})
	if r := cycle(t, a); r.Unanswered != 1 {
		t.Fatalf("before the purge: %+v, want one unanswered order", r)
	}

	w.exec(t, w.order, `DELETE FROM outbox WHERE id = $1`, ev) // order purge-outbox
	restarted, reg := newAudit(t, w, auditor.Config{Grace: time.Minute})
	r := cycle(t, restarted)
	if r.Unanswered != 1 || len(r.UnansweredOrders) != 1 || r.UnansweredOrders[0].OrderID != stuck || r.UnansweredOrders[0].Version != 2 {
		t.Fatalf("after the purge and a restart: unanswered %d %+v, want order %s at version 2", r.Unanswered, r.UnansweredOrders, stuck)
	}
	if g := unansweredGauge(t, reg); g != 1 {
		t.Fatalf("delivery_unanswered_orders = %v, want 1", g)
	}
	u := reportJSON(t, r)["unanswered_orders"].([]any)[0].(map[string]any)
	if _, ok := u["event_id"]; ok || u["event_name"] != contracts.EventOrderPlaced || u["since"] == nil {
		t.Fatalf("finding %v, want no event_id (purged), the request's name and since", u)
	}
}

// TestAuditCountsDeadLettersOfMessagesInNoOutbox: order's consumer dead-lettered a
// forged answer (an event_id no outbox holds) and a message without one: both are
// open dead letters of unknown messages, per consumer in the report and the metrics,
// and the oldest sets delivery_dead_letter_oldest_seconds; a resolved one is not
// counted, and the dead letter of stock's real answer is counted as before.
func TestAuditCountsDeadLettersOfMessagesInNoOutbox(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, reg := newAudit(t, w, auditor.Config{})
	forged := uuid.Must(uuid.NewV7())
	ins := `INSERT INTO dead_letter (consumer, message_key, event_id, event_name, reason, attempts, dead_lettered_at, resolved_at, resolution)
VALUES ('order', $1, $2, $3, 'handler: no such order', 5, $4, $5, $6)`
	w.exec(t, w.order, ins, forged.String(), forged, contracts.EventStockReservationConfirmed, time.Now().Add(-2*time.Hour), nil, nil)
	w.exec(t, w.order, ins, "sha256:00ff", nil, nil, time.Now().Add(-30*time.Minute), nil, nil)
	w.exec(t, w.order, ins, "sha256:aa00", nil, nil, time.Now().Add(-3*time.Hour), time.Now(), "dropped")

	r := reportJSON(t, cycle(t, a))
	if g := metric(t, reg, "delivery_dead_letter_oldest_seconds", contracts.ConsumerOrder); g < 2*3600-60 || g > 2*3600+60 {
		t.Errorf("delivery_dead_letter_oldest_seconds{order} = %v, want about 7200 (the forged answer's)", g)
	}
	if n, _ := r["dead_lettered_unknown"].(map[string]any); n[contracts.ConsumerOrder] != 2.0 {
		t.Errorf("dead_lettered_unknown %v, want order 2", r["dead_lettered_unknown"])
	}
	if list, _ := r["unknown_dead_letters"].([]any); len(list) != 2 || list[0].(map[string]any)["message_key"] != forged.String() ||
		list[0].(map[string]any)["consumer"] != contracts.ConsumerOrder || list[1].(map[string]any)["message_key"] != "sha256:00ff" {
		t.Errorf("unknown_dead_letters %v, want the forged answer, then the message without an event_id", list)
	}
	if g := metric(t, reg, "delivery_dead_lettered_unknown_messages", contracts.ConsumerOrder); g != 2 {
		t.Errorf("delivery_dead_lettered_unknown_messages{order} = %v, want 2", g)
	}
	if g := metric(t, reg, "delivery_dead_lettered_events", contracts.ConsumerOrder); g != 2 {
		t.Errorf("delivery_dead_lettered_events{order} = %v, want 2", g)
	}

	// Stock's real answer, dead-lettered three hours ago: a dead letter of a published
	// event, not an unknown one; the oldest of all.
	order, _ := placed(t, w, 3*time.Hour+time.Minute, contracts.ConsumerStock, contracts.ConsumerShipping)
	at := time.Now().Add(-3*time.Hour - time.Minute)
	real := w.answer(t, order, contracts.EventStockReservationConfirmed, 2, at, ptr(at))
	w.exec(t, w.order, ins, real.String(), real, contracts.EventStockReservationConfirmed, time.Now().Add(-3*time.Hour), nil, nil)
	rep := cycle(t, a)
	if rep.DeadLettered[contracts.ConsumerOrder] != 1 || rep.DeadLetteredUnknown[contracts.ConsumerOrder] != 2 {
		t.Errorf("dead_lettered %v, dead_lettered_unknown %v, want order 1 and 2", rep.DeadLettered, rep.DeadLetteredUnknown)
	}
	if g := metric(t, reg, "delivery_dead_lettered_events", contracts.ConsumerOrder); g != 3 {
		t.Errorf("delivery_dead_lettered_events{order} = %v, want 3 (1 published event, 2 unknown)", g)
	}
	if g := metric(t, reg, "delivery_dead_letter_oldest_seconds", contracts.ConsumerOrder); g < 3*3600-60 || g > 3*3600+60 {
		t.Errorf("delivery_dead_letter_oldest_seconds{order} = %v, want about 10 800 (the real answer's)", g)
	}
}

// TestAuditReportsAnswersTheOrderContradicts: an order rejected while stock's outbox
// says confirmed, and one confirmed while it says rejected, are contradictions, also
// for a fresh auditor; orders that agree with stock's answer, or still wait for it,
// are not; a cancel past the confirmation ends the contradiction, seen by the re-read
// of the findings.
func TestAuditReportsAnswersTheOrderContradicts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	at := time.Now().Add(-10 * time.Minute)
	answered := func(said, applied string) (order, answer uuid.UUID) {
		order, _ = placed(t, w, 11*time.Minute, contracts.ConsumerStock, contracts.ConsumerShipping)
		answer = w.answer(t, order, said, 2, at, ptr(at))
		if applied != "" { // order took stock's answer (a later copy of the same order is skipped)
			w.process(t, contracts.ConsumerOrder, answer, at.Add(time.Second))
			w.event(t, order, applied, 3, at.Add(time.Second), ptr(at.Add(time.Second)))
		}
		return order, answer
	}
	rejectedButConfirmed, a1 := answered(contracts.EventStockReservationRejected, contracts.EventOrderConfirmed)
	confirmedButRejected, a2 := answered(contracts.EventStockReservationConfirmed, contracts.EventOrderRejected)
	answered(contracts.EventStockReservationConfirmed, contracts.EventOrderConfirmed)
	answered(contracts.EventStockReservationRejected, contracts.EventOrderRejected)
	answered(contracts.EventStockReservationConfirmed, "") // not applied yet: unanswered, no contradiction

	for _, name := range []string{"first", "restarted"} {
		// A window shorter than the answers' age: past the forward pass, only the
		// findings pass reads them again.
		a, reg := newAudit(t, w, auditor.Config{Window: 5 * time.Minute})
		r := cycle(t, a)
		if r.Contradictions != 2 || len(r.ContradictedOrders) != 2 {
			t.Fatalf("%s auditor: contradictions %d %+v, want 2", name, r.Contradictions, r.ContradictedOrders)
		}
		want := map[uuid.UUID]auditor.ContradictionFinding{
			rejectedButConfirmed: {EventID: a1, AnswerStatus: "rejected", OrderStatus: "confirmed"},
			confirmedButRejected: {EventID: a2, AnswerStatus: "confirmed", OrderStatus: "rejected"},
		}
		for _, c := range r.ContradictedOrders {
			x, ok := want[c.OrderID]
			if !ok || c.EventID != x.EventID || c.AnswerStatus != x.AnswerStatus || c.OrderStatus != x.OrderStatus ||
				c.Producer != contracts.ProducerStock || c.OrderVersion != 3 {
				t.Fatalf("%s auditor: finding %+v, want %+v", name, c, x)
			}
		}
		if g := metricValue(t, reg, "delivery_contradicted_orders"); g != 2 {
			t.Fatalf("%s auditor: delivery_contradicted_orders = %v, want 2", name, g)
		}
		if r.Unanswered != 1 {
			t.Fatalf("%s auditor: unanswered %d, want the order that has not applied its answer", name, r.Unanswered)
		}
		if name == "restarted" {
			w.event(t, rejectedButConfirmed, contracts.EventOrderCancelled, 4, time.Now(), nil)
			if r := cycle(t, a); r.Contradictions != 1 || r.ContradictedOrders[0].OrderID != confirmedButRejected {
				t.Fatalf("after the cancel: %+v, want the rejected order alone", r.ContradictedOrders)
			}
		}
	}
}
