package auditor

import (
	"context"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/store"
)

// BoardRow is one order on the live page: when it reached each stage of the two legs.
// The request leg (in outbox, published, each consumer) follows the order's latest
// event other than the outcome of an answer (its place, or its cancel); the answer leg
// follows the latest answer to the order in another producer's outbox.
type BoardRow struct {
	OrderID   uuid.UUID  `json:"order_id"`
	Status    string     `json:"status"`
	Version   int        `json:"version"`
	Event     string     `json:"event,omitempty"`
	EventID   *uuid.UUID `json:"event_id,omitempty"`
	Draft     time.Time  `json:"draft"`
	Placed    *time.Time `json:"placed,omitempty"`
	InOutbox  *time.Time `json:"in_outbox,omitempty"`
	Published *time.Time `json:"published,omitempty"`
	// Consumers holds each receiving consumer's delivery of the latest event, keyed by
	// consumer name ("stock", "shipping").
	Consumers map[string]Delivery `json:"consumers"`
	// Answer is the answer leg, absent until an answer is in its producer's outbox.
	Answer *AnswerLeg `json:"answer,omitempty"`
}

// AnswerLeg is an answer on its way back: in its producer's outbox, published by that
// producer's relay, applied by each consumer that receives it, and the order status
// it led to.
type AnswerLeg struct {
	Producer  string     `json:"producer"`
	Event     string     `json:"event"`
	EventID   uuid.UUID  `json:"event_id"`
	InOutbox  time.Time  `json:"in_outbox"`
	Published *time.Time `json:"published,omitempty"`
	// Consumers holds each receiving consumer's delivery of the answer ("order").
	Consumers map[string]Delivery `json:"consumers"`
	// Outcome is the order status the answer led to ("confirmed", "rejected") and
	// OutcomeAt when the order's event recording it was written; absent until then.
	Outcome   string     `json:"outcome,omitempty"`
	OutcomeAt *time.Time `json:"outcome_at,omitempty"`
}

// outcomes returns the order status each order event an applied answer writes records.
func outcomes() map[string]string {
	return map[string]string{contracts.EventOrderConfirmed: "confirmed", contracts.EventOrderRejected: "rejected"}
}

// Board returns the n most recent orders as rows of the live page, newest first.
func (j *Journeys) Board(ctx context.Context, n int) ([]BoardRow, error) {
	orders, err := j.st.LatestOrders(ctx, n)
	if err != nil || len(orders) == 0 {
		return []BoardRow{}, err
	}
	now := j.now()
	rows, err := eventsOfOrders(ctx, j.st, orders, now, n*maxEventsPerOrder)
	if err != nil {
		return nil, err
	}
	own, outcome := orderProducer(), outcomes()
	placed, outcomeAt := map[uuid.UUID]time.Time{}, map[uuid.UUID]store.OutboxRow{}
	latest, answer := map[uuid.UUID]store.OutboxRow{}, map[uuid.UUID]store.OutboxRow{}
	for _, r := range rows { // in id (time) order: the last one wins
		switch {
		case r.Producer != own:
			answer[r.OrderID] = r
		case outcome[r.EventName] != "":
			outcomeAt[r.OrderID] = r
		default:
			if r.EventName == contracts.EventOrderPlaced {
				placed[r.OrderID] = r.OccurredAt
			}
			if l, ok := latest[r.OrderID]; !ok || r.OrderVersion > l.OrderVersion {
				latest[r.OrderID] = r
			}
		}
	}
	last := make([]store.OutboxRow, 0, len(latest)+len(answer))
	for _, r := range latest {
		last = append(last, r)
	}
	for _, r := range answer {
		last = append(last, r)
	}
	ds, err := deliveries(ctx, j.st, last, now, j.grace)
	if err != nil {
		return nil, err
	}
	out := make([]BoardRow, 0, len(orders))
	for _, o := range orders {
		b := BoardRow{OrderID: o.ID, Status: o.Status, Version: o.Version, Draft: o.CreatedAt, Consumers: map[string]Delivery{}}
		if at, ok := placed[o.ID]; ok {
			b.Placed = &at
		}
		if r, ok := latest[o.ID]; ok {
			id, occurred := r.ID, r.OccurredAt
			b.Event, b.EventID, b.InOutbox, b.Published = r.EventName, &id, &occurred, r.PublishedAt
			for _, d := range ds[r.ID] {
				b.Consumers[d.Consumer] = d
			}
		}
		if r, ok := answer[o.ID]; ok {
			a := &AnswerLeg{Producer: r.Producer, Event: r.EventName, EventID: r.ID, InOutbox: r.OccurredAt,
				Published: r.PublishedAt, Consumers: map[string]Delivery{}}
			for _, d := range ds[r.ID] {
				a.Consumers[d.Consumer] = d
			}
			if oc, ok := outcomeAt[o.ID]; ok && !oc.OccurredAt.Before(r.OccurredAt) {
				at := oc.OccurredAt
				a.Outcome, a.OutcomeAt = outcome[oc.EventName], &at
			}
			b.Answer = a
		}
		out = append(out, b)
	}
	return out, nil
}

// PublishedTotal counts the published events of every producer: those the audit
// checked since it started, and those published after its cursors (counted up to
// 10 000 per producer).
func (a *Audit) PublishedTotal(ctx context.Context) (int64, error) {
	total := a.Report().Audited
	for producer, cursor := range a.Cursors() {
		head, err := a.st.PublishedAfter(ctx, producer, cursor, 10000)
		if err != nil {
			return 0, err
		}
		total += int64(head)
	}
	return total, nil
}
