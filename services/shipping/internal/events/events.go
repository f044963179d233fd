// Package events applies the order events to the shipping database: the
// handlers of order.order.placed.v1 and order.order.cancelled.v1 that run
// inside the inbox's transaction.
package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/services/shipping/internal/shipping"
	"example.com/shop/services/shipping/internal/store"
)

// Consumer is the name shipping records its processed_event keys under.
const Consumer = contracts.ConsumerShipping

// Register adds the shipping handlers to in: order.order.placed.v1 records the
// status placed, order.order.cancelled.v1 the status cancelled, each through
// store.ApplyStatus (docs/architecture.md, rule 4), and when it wins brings the
// order's shipment in step (placed -> ready, cancelled -> cancelled, created when
// missing). Stale events are logged to logger at info level (nil discards) and
// acknowledged: they are not failures. A change that can never apply is an error
// wrapping inbox.ErrPermanent (dead-lettered at once; the inbox does the same for a
// payload that does not decode); a database error is returned as it is, for the
// inbox to retry or to wait out (rule 3).
func Register(in *inbox.Inbox, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := handlers{logger: logger}
	inbox.On(in, contracts.EventOrderPlaced, h.placed)
	inbox.On(in, contracts.EventOrderCancelled, h.cancelled)
}

type handlers struct {
	logger *slog.Logger
}

// placed records the status placed and makes the order's shipment ready when the
// event's version wins.
func (h handlers) placed(ctx context.Context, tx pgx.Tx, m inbox.Meta, p contracts.OrderPlaced) error {
	won, err := h.apply(ctx, tx, m, shipping.StatusChange{OrderID: p.OrderID, Status: shipping.StatusPlaced, Version: p.Version})
	if err != nil || !won {
		return err
	}
	return store.SetShipment(ctx, tx, p.OrderID, shipping.ShipmentReady)
}

// cancelled records the status cancelled and cancels the order's shipment when the
// event's version wins.
func (h handlers) cancelled(ctx context.Context, tx pgx.Tx, m inbox.Meta, p contracts.OrderCancelled) error {
	won, err := h.apply(ctx, tx, m, shipping.StatusChange{OrderID: p.OrderID, Status: shipping.StatusCancelled, Version: p.Version})
	if err != nil || !won {
		return err
	}
	return store.SetShipment(ctx, tx, p.OrderID, shipping.ShipmentCancelled)
}

// apply runs store.ApplyStatus for c and reports whether c won. Only the payload
// version orders changes; the event's id and occurred_at play no part.
func (h handlers) apply(ctx context.Context, tx pgx.Tx, m inbox.Meta, c shipping.StatusChange) (bool, error) {
	applied, err := store.ApplyStatus(ctx, tx, c)
	if errors.Is(err, shipping.ErrInvalidChange) {
		return false, fmt.Errorf("%s: %w: %w", m.EventName, inbox.ErrPermanent, err)
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", m.EventName, err)
	}
	if !applied {
		logging.WithEvent(h.logger, m.EventID.String(), m.CorrelationID).LogAttrs(ctx, slog.LevelInfo,
			"stale order event ignored: a version at least as new is already recorded",
			slog.String("event_name", m.EventName), slog.String("order_id", c.OrderID.String()), slog.Int("version", c.Version))
	}
	return applied, nil
}
