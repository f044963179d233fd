package auditor

import (
	"context"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/store"
)

// BoardRow is one order on the live page: when it reached each column. The columns
// after "placed" follow the order's latest event (its place, or its cancel).
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
}

// Board returns the n most recent orders as rows of the live page, newest first.
func (j *Journeys) Board(ctx context.Context, n int) ([]BoardRow, error) {
	orders, err := j.st.LatestOrders(ctx, n)
	if err != nil || len(orders) == 0 {
		return []BoardRow{}, err
	}
	ids := make([]uuid.UUID, len(orders))
	from, until := orders[0].CreatedAt, orders[0].UpdatedAt
	for i, o := range orders {
		ids[i] = o.ID
		if o.CreatedAt.Before(from) {
			from = o.CreatedAt
		}
		if o.UpdatedAt.After(until) {
			until = o.UpdatedAt
		}
	}
	rows, err := j.st.OutboxOfOrders(ctx, ids, minID(from.Add(-eventSlack)), maxID(until.Add(eventSlack)), n*maxEventsPerOrder)
	if err != nil {
		return nil, err
	}
	placed := map[uuid.UUID]time.Time{}
	latest := map[uuid.UUID]store.OutboxRow{}
	for _, r := range rows {
		if r.EventName == contracts.EventOrderPlaced {
			placed[r.OrderID] = r.OccurredAt
		}
		if l, ok := latest[r.OrderID]; !ok || r.OrderVersion > l.OrderVersion {
			latest[r.OrderID] = r
		}
	}
	last := make([]store.OutboxRow, 0, len(latest))
	for _, r := range latest {
		last = append(last, r)
	}
	ds, err := deliveries(ctx, j.st, last, j.now(), j.grace)
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
		out = append(out, b)
	}
	return out, nil
}

// PublishedTotal counts the published events: those the audit checked since it
// started, and those published after its cursor (counted up to 10 000).
func (a *Audit) PublishedTotal(ctx context.Context) (int64, error) {
	head, err := a.st.PublishedAfter(ctx, a.Cursor(), 10000)
	if err != nil {
		return 0, err
	}
	return a.Report().Audited + int64(head), nil
}
