package auditor

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/store"
)

// ContradictionFinding is an order whose status contradicts the answer its producer
// wrote: stock's outbox holds the order's confirmation and the order is rejected, or
// the reverse. The order applied an answer its producer never gave: a forged answer,
// or a bug (docs/operations.md, "ContradictedOrders").
type ContradictionFinding struct {
	OrderID uuid.UUID `json:"order_id"`
	// Producer, EventID and EventName are the answer in its producer's outbox.
	Producer  string    `json:"producer"`
	EventID   uuid.UUID `json:"event_id"`
	EventName string    `json:"event_name"`
	// AnswerStatus is the status the answer leads to ("confirmed", "rejected"): what
	// the producer said.
	AnswerStatus string `json:"answer_status"`
	// OrderStatus and OrderVersion are the order's current row: what the order has.
	OrderStatus  string     `json:"order_status"`
	OrderVersion int        `json:"order_version"`
	PublishedAt  *time.Time `json:"published_at"`
	FirstSeen    time.Time  `json:"first_seen"`
}

// answerOutcomes returns the order status each answer leads to.
func answerOutcomes() map[string]string {
	return map[string]string{contracts.EventStockReservationConfirmed: "confirmed", contracts.EventStockReservationRejected: "rejected"}
}

// checkAnswers compares the answers among rows with their orders' current status:
// an order in the status of another answer contradicts it and is recorded as a
// finding, keyed by the answer's event id; an answer the order agrees with (or has
// not applied yet, or a cancel moved past) clears its finding.
func (a *Audit) checkAnswers(ctx context.Context, rows []store.OutboxRow, now time.Time) error {
	outcome := answerOutcomes()
	var ids []uuid.UUID
	for _, r := range rows {
		if outcome[r.EventName] != "" {
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
	outcomes := map[string]bool{}
	for _, s := range outcome {
		outcomes[s] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range rows {
		said := outcome[r.EventName]
		if said == "" {
			continue
		}
		o, found := current[r.OrderID]
		if !found || o.Status == said || !outcomes[o.Status] {
			delete(a.contradictions, r.ID)
			continue
		}
		c := a.contradictions[r.ID]
		if c == nil {
			c = &ContradictionFinding{OrderID: r.OrderID, Producer: r.Producer, EventID: r.ID, EventName: r.EventName,
				AnswerStatus: said, PublishedAt: r.PublishedAt, FirstSeen: now}
			a.contradictions[r.ID] = c
			a.logger.WarnContext(ctx, "order contradicts its answer", slog.String("order_id", r.OrderID.String()),
				slog.String("producer", r.Producer), slog.String("answer", said), slog.String("order_status", o.Status))
		}
		c.OrderStatus, c.OrderVersion = o.Status, o.Version
	}
	return nil
}
