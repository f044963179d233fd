package auditor

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/store"
)

// request is what an order waiting in a status asked for: the event that moved it
// there, and the answers that move it on, each published by its producer of the
// registry.
type request struct {
	event   string
	answers []string
}

// requests returns the contract's requests by the order status that waits: a placed
// order waits for stock's confirmation or rejection (store.WaitingOrders reads the
// orders in that status).
func requests() map[string]request {
	return map[string]request{
		"placed": {event: contracts.EventOrderPlaced,
			answers: []string{contracts.EventStockReservationConfirmed, contracts.EventStockReservationRejected}},
	}
}

// maxAnswersRead bounds the events read for the unanswered orders in one cycle, per
// producer.
const maxAnswersRead = 1000

// requestSlack bounds the id range searched for the event of an order's last change:
// the event is written in the transaction of that change, its id made by the same
// process's clock a few milliseconds after the order's updated_at.
const requestSlack = time.Second

// maxUnansweredRead bounds the unanswered orders one cycle reads and counts.
const maxUnansweredRead = 1000

// readUnanswered returns the orders left waiting for an answer (see [UnansweredFinding]),
// oldest last change first, at most maxUnansweredRead. It reads them from the order
// database on every cycle, so a restarted auditor finds the same ones, and a purged
// outbox hides none: the request's event and the answer are looked up in the
// outboxes, and left out of the finding when they are not there.
func (a *Audit) readUnanswered(ctx context.Context, now time.Time) ([]UnansweredFinding, error) {
	orders, err := a.st.WaitingOrders(ctx, now.Add(-a.cfg.Grace), maxUnansweredRead)
	if err != nil || len(orders) == 0 {
		return []UnansweredFinding{}, err
	}
	reqs := requests()
	current := make(map[uuid.UUID]store.Order, len(orders))
	windows := make([]store.OrderWindow, len(orders))
	ids := make([]uuid.UUID, len(orders))
	for i, o := range orders {
		current[o.ID], ids[i] = o, o.ID
		windows[i] = store.OrderWindow{OrderID: o.ID, From: minID(o.UpdatedAt.Add(-requestSlack)), Until: maxID(o.UpdatedAt.Add(requestSlack))}
	}
	// The request's event was written with the order's last change.
	events, err := a.st.OutboxNear(ctx, orderProducer(), windows, maxAnswersRead)
	if err != nil {
		return nil, err
	}
	asked := map[uuid.UUID]store.OutboxRow{}
	for _, r := range events {
		if o := current[r.OrderID]; r.EventName == reqs[o.Status].event && r.OrderVersion == o.Version {
			asked[r.OrderID] = r
		}
	}
	answers, err := a.answersTo(ctx, current, ids, orders[0].UpdatedAt, now)
	if err != nil {
		return nil, err
	}
	out := make([]UnansweredFinding, 0, len(orders))
	for _, o := range orders {
		u := UnansweredFinding{OrderID: o.ID, EventName: reqs[o.Status].event, Version: o.Version, Since: o.UpdatedAt,
			FirstSeen: o.UpdatedAt.Add(a.cfg.Grace), Answer: answers[o.ID]}
		if r, ok := asked[o.ID]; ok {
			id := r.ID
			u.EventID, u.PublishedAt = &id, r.PublishedAt
		}
		out = append(out, u)
	}
	return out, nil
}

// answeringProducers returns the producers of every answer of reqs, each once, in the
// order of contracts.Producers.
func answeringProducers(reqs map[string]request) []string {
	var out []string
	for _, p := range contracts.Producers() {
		for _, req := range reqs {
			if slices.ContainsFunc(req.answers, p.Publishes) {
				out = append(out, p.Name)
				break
			}
		}
	}
	return out
}

// answersTo looks for the answer to each waiting order (current, ids its keys) at its
// version in the answering producers' outboxes, between from (less eventSlack) and
// now; it returns them by order id, with no entry for an order without one.
func (a *Audit) answersTo(ctx context.Context, current map[uuid.UUID]store.Order, ids []uuid.UUID, from, now time.Time) (map[uuid.UUID]*Answer, error) {
	reqs := requests()
	answers := map[uuid.UUID]*Answer{}
	for _, producer := range answeringProducers(reqs) {
		rows, err := a.st.OutboxOfOrders(ctx, producer, ids, minID(from.Add(-eventSlack)), maxID(now), maxAnswersRead)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			o, ok := current[r.OrderID]
			if !ok || r.OrderVersion != o.Version || !slices.Contains(reqs[o.Status].answers, r.EventName) {
				continue
			}
			answers[r.OrderID] = &Answer{Producer: r.Producer, EventID: r.ID, EventName: r.EventName, PublishedAt: r.PublishedAt}
		}
	}
	return answers, nil
}
