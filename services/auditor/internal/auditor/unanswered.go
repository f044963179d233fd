package auditor

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/store"
)

// request is an event that asks for an answer: its order keeps status until the
// order applies one of answers, each published by its producer of the registry.
type request struct {
	status  string
	answers []string
}

// requests returns the contract's requests by event name: a placed order waits for
// stock's confirmation or rejection.
func requests() map[string]request {
	return map[string]request{
		contracts.EventOrderPlaced: {status: "placed",
			answers: []string{contracts.EventStockReservationConfirmed, contracts.EventStockReservationRejected}},
	}
}

// maxAnswersRead bounds the answering events read for the unanswered orders in one
// cycle.
const maxAnswersRead = 1000

// checkRequests records the orders of rows' requests still waiting, at the request's
// status and version, for an answer (rows are published more than Grace ago), and
// forgets those that moved on.
func (a *Audit) checkRequests(ctx context.Context, rows []store.OutboxRow, now time.Time) error {
	reqs := requests()
	var ids []uuid.UUID
	for _, r := range rows {
		if _, ok := reqs[r.EventName]; ok {
			ids = append(ids, r.OrderID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	orders, err := a.st.Orders(ctx, ids)
	if err != nil {
		return err
	}
	current := make(map[uuid.UUID]store.Order, len(orders))
	for _, o := range orders {
		current[o.ID] = o
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range rows {
		req, ok := reqs[r.EventName]
		if !ok {
			continue
		}
		o, found := current[r.OrderID]
		if !found || o.Status != req.status || o.Version != r.OrderVersion {
			if u := a.waiting[r.OrderID]; u != nil && u.EventID == r.ID {
				delete(a.waiting, r.OrderID)
			}
			continue
		}
		if a.waiting[r.OrderID] == nil {
			a.waiting[r.OrderID] = &UnansweredFinding{OrderID: r.OrderID, EventID: r.ID, EventName: r.EventName,
				Version: r.OrderVersion, PublishedAt: *r.PublishedAt, FirstSeen: now}
			a.logger.WarnContext(ctx, "order without an answer", slog.String("order_id", r.OrderID.String()),
				slog.String("event_id", r.ID.String()), slog.String("status", req.status))
		}
	}
	return nil
}

// recheckUnanswered re-reads every waiting order: one that moved on (or is gone) is
// forgotten; for the others it looks for an answer in the answering producers'
// outboxes, so the finding says which leg stopped.
func (a *Audit) recheckUnanswered(ctx context.Context, now time.Time) error {
	reqs := requests()
	a.mu.Lock()
	waiting := make(map[uuid.UUID]UnansweredFinding, len(a.waiting))
	for id, u := range a.waiting {
		if len(waiting) < maxRecheckFindings {
			waiting[id] = *u
		}
	}
	a.mu.Unlock()
	if len(waiting) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, 0, len(waiting))
	from := now
	for id, u := range waiting {
		ids = append(ids, id)
		if t := uuidTime(u.EventID); t.Before(from) {
			from = t
		}
	}
	orders, err := a.st.Orders(ctx, ids)
	if err != nil {
		return err
	}
	still := map[uuid.UUID]bool{}
	for _, o := range orders {
		u := waiting[o.ID]
		if o.Status == reqs[u.EventName].status && o.Version == u.Version {
			still[o.ID] = true
		}
	}
	answers, err := a.answersTo(ctx, waiting, ids, from, now)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for id := range waiting {
		u := a.waiting[id]
		if u == nil {
			continue
		}
		if !still[id] {
			delete(a.waiting, id)
			continue
		}
		u.Answer = answers[id]
	}
	return nil
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

// answersTo looks for the answer to each waiting order (ids, their keys) in the
// answering producers' outboxes, between from (less eventSlack) and now; it returns
// them by order id, with no entry for an order without one.
func (a *Audit) answersTo(ctx context.Context, waiting map[uuid.UUID]UnansweredFinding, ids []uuid.UUID, from, now time.Time) (map[uuid.UUID]*Answer, error) {
	reqs := requests()
	answers := map[uuid.UUID]*Answer{}
	for _, producer := range answeringProducers(reqs) {
		rows, err := a.st.OutboxOfOrders(ctx, producer, ids, minID(from.Add(-eventSlack)), maxID(now), maxAnswersRead)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			u, ok := waiting[r.OrderID]
			if !ok || r.OrderVersion != u.Version || !slices.Contains(reqs[u.EventName].answers, r.EventName) {
				continue
			}
			answers[r.OrderID] = &Answer{Producer: r.Producer, EventID: r.ID, EventName: r.EventName, PublishedAt: r.PublishedAt}
		}
	}
	return answers, nil
}
