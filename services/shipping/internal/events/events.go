// Package events applies the order events to the shipping database: the
// handlers of order.order.placed.v1, order.order.confirmed.v1,
// order.order.rejected.v1 and order.order.cancelled.v1 that run inside the
// inbox's transaction.
package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/services/shipping/internal/shipping"
	"example.com/shop/services/shipping/internal/store"
)

// Consumer is the name shipping records its processed_event keys under.
const Consumer = contracts.ConsumerShipping

// Register adds the shipping handlers to in: each order event records the order's
// status it names (placed, confirmed, rejected, cancelled) and, when its version wins
// (docs/architecture.md, rule 4: only the version decides), brings the order's shipment
// in step (shipping.ShipmentStatusFor: placed -> pending, confirmed -> ready, rejected
// or cancelled -> cancelled; created when missing). All four are inbox.GroupHandlers:
// with group commit, the events of one name in a group are applied by one set-based
// statement per round of distinct orders (store.Apply). Stale events are logged to
// logger at info level (nil discards) and acknowledged: they are not failures. A
// change that can never apply fails its event alone with an error wrapping
// inbox.ErrPermanent (dead-lettered at once; the inbox does the same for a payload
// that does not decode); a database error is returned as it is, for the inbox to
// retry or to wait out (rule 3).
func Register(in *inbox.Inbox, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := handlers{logger: logger}
	inbox.OnGroup(in, contracts.EventOrderPlaced, follow(h, shipping.StatusPlaced, func(p contracts.OrderPlaced) (uuid.UUID, int) { return p.OrderID, p.Version }))
	inbox.OnGroup(in, contracts.EventOrderConfirmed, follow(h, shipping.StatusConfirmed, func(p contracts.OrderConfirmed) (uuid.UUID, int) { return p.OrderID, p.Version }))
	inbox.OnGroup(in, contracts.EventOrderRejected, follow(h, shipping.StatusRejected, func(p contracts.OrderRejected) (uuid.UUID, int) { return p.OrderID, p.Version }))
	inbox.OnGroup(in, contracts.EventOrderCancelled, follow(h, shipping.StatusCancelled, func(p contracts.OrderCancelled) (uuid.UUID, int) { return p.OrderID, p.Version }))
}

type handlers struct {
	logger *slog.Logger
}

// follow is the group handler of the order event whose payload T means status (ref
// reads its order id and version): it records status for each event's order and moves
// the shipments of the orders whose event's version wins.
func follow[T any](h handlers, status shipping.Status, ref func(T) (uuid.UUID, int)) inbox.GroupHandler[T] {
	return func(ctx context.Context, tx pgx.Tx, events []inbox.Event[T]) error {
		cs := make([]shipping.StatusChange, len(events))
		for n, e := range events {
			orderID, version := ref(e.Payload)
			cs[n] = shipping.StatusChange{OrderID: orderID, Status: status, Version: version}
			if err := cs[n].Validate(); err != nil {
				return inbox.EventFailed(n, fmt.Errorf("%s: %w: %w", e.EventName, inbox.ErrPermanent, err))
			}
		}
		won, err := store.Apply(ctx, tx, cs)
		if errors.Is(err, shipping.ErrInvalidChange) { // Validate passed: the status has no shipment status
			return inbox.EventFailed(0, fmt.Errorf("%s: %w: %w", events[0].EventName, inbox.ErrPermanent, err))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", events[0].EventName, err)
		}
		for n, w := range won {
			if !w {
				h.stale(ctx, events[n].Meta, cs[n])
			}
		}
		return nil
	}
}

// stale logs an event whose change lost to a version at least as new. Only the
// payload version orders changes; the event's id and occurred_at play no part.
func (h handlers) stale(ctx context.Context, m inbox.Meta, c shipping.StatusChange) {
	logging.WithEvent(h.logger, m.EventID.String(), m.CorrelationID).LogAttrs(ctx, slog.LevelInfo,
		"stale order event ignored: a version at least as new is already recorded",
		slog.String("event_name", m.EventName), slog.String("order_id", c.OrderID.String()), slog.Int("version", c.Version))
}
