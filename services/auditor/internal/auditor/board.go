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
// follows the latest answer to the order in another producer's outbox: an event the
// order's producer receives.
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
	legs := sortLegs(rows)
	last := make([]store.OutboxRow, 0, len(legs.request)+len(legs.answer))
	for _, r := range legs.request {
		last = append(last, r)
	}
	for _, r := range legs.answer {
		last = append(last, r)
	}
	ds, err := deliveries(ctx, j.st, last, now, j.grace)
	if err != nil {
		return nil, err
	}
	out := make([]BoardRow, 0, len(orders))
	for _, o := range orders {
		out = append(out, legs.row(o, ds))
	}
	return out, nil
}

// legs are the events of the board's orders sorted by order id into the two legs.
type legs struct {
	placed  map[uuid.UUID]time.Time       // when the order was placed
	request map[uuid.UUID]store.OutboxRow // the order's latest own event, other than an outcome
	answer  map[uuid.UUID]store.OutboxRow // the latest answer in another producer's outbox
	outcome map[uuid.UUID]store.OutboxRow // the order's latest event recording an answer's outcome
}

// sortLegs sorts rows, in id (time) order, into legs: the last one of each kind wins.
// Another producer's event that the order's producer does not receive answers nothing:
// it is left out.
func sortLegs(rows []store.OutboxRow) legs {
	own, outcome := orderProducer(), outcomes()
	back, _ := contracts.ConsumerNamed(own)
	l := legs{placed: map[uuid.UUID]time.Time{}, request: map[uuid.UUID]store.OutboxRow{},
		answer: map[uuid.UUID]store.OutboxRow{}, outcome: map[uuid.UUID]store.OutboxRow{}}
	for _, r := range rows {
		switch {
		case r.Producer != own:
			if back.Receives(r.EventName) {
				l.answer[r.OrderID] = r
			}
		case outcome[r.EventName] != "":
			l.outcome[r.OrderID] = r
		default:
			if r.EventName == contracts.EventOrderPlaced {
				l.placed[r.OrderID] = r.OccurredAt
			}
			if q, ok := l.request[r.OrderID]; !ok || r.OrderVersion > q.OrderVersion {
				l.request[r.OrderID] = r
			}
		}
	}
	return l
}

// row returns o's row of the board, with the deliveries ds of its events by event id.
func (l legs) row(o store.Order, ds map[uuid.UUID][]Delivery) BoardRow {
	b := BoardRow{OrderID: o.ID, Status: o.Status, Version: o.Version, Draft: o.CreatedAt, Consumers: map[string]Delivery{}}
	if at, ok := l.placed[o.ID]; ok {
		b.Placed = &at
	}
	if r, ok := l.request[o.ID]; ok {
		id, occurred := r.ID, r.OccurredAt
		b.Event, b.EventID, b.InOutbox, b.Published = r.EventName, &id, &occurred, r.PublishedAt
		for _, d := range ds[r.ID] {
			b.Consumers[d.Consumer] = d
		}
	}
	if r, ok := l.answer[o.ID]; ok {
		a := &AnswerLeg{Producer: r.Producer, Event: r.EventName, EventID: r.ID, InOutbox: r.OccurredAt,
			Published: r.PublishedAt, Consumers: map[string]Delivery{}}
		for _, d := range ds[r.ID] {
			a.Consumers[d.Consumer] = d
		}
		if oc, ok := l.outcome[o.ID]; ok && !oc.OccurredAt.Before(r.OccurredAt) {
			at := oc.OccurredAt
			a.Outcome, a.OutcomeAt = outcomes()[oc.EventName], &at
		}
		b.Answer = a
	}
	return b
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
