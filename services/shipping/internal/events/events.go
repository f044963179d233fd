// Package events applies the order events to the shipping database: the
// handlers of order.order.placed.v1, order.order.confirmed.v1,
// order.order.rejected.v1 and order.order.cancelled.v1 that run inside the
// inbox's transaction.
package events

import (
	"context"
	"encoding/json"
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
// status it names (placed, confirmed, rejected, cancelled) through store.ApplyStatus
// (docs/architecture.md, rule 4: only the version decides), and when it wins brings
// the order's shipment in step (shipping.ShipmentStatusFor: placed -> pending,
// confirmed -> ready, rejected or cancelled -> cancelled; created when missing). Stale
// events are logged to logger at info level (nil discards) and acknowledged: they are
// not failures. A payload that does not decode, or a change that can never apply, is
// an error wrapping inbox.ErrPermanent (dead-lettered at once); a database error is
// returned as it is, for the inbox to retry or to wait out (rule 3).
func Register(in *inbox.Inbox, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := handlers{logger: logger}
	in.Register(contracts.EventOrderPlaced, h.follow(shipping.StatusPlaced))
	in.Register(contracts.EventOrderConfirmed, h.follow(shipping.StatusConfirmed))
	in.Register(contracts.EventOrderRejected, h.follow(shipping.StatusRejected))
	in.Register(contracts.EventOrderCancelled, h.follow(shipping.StatusCancelled))
}

type handlers struct {
	logger *slog.Logger
}

// orderRef is what every order event's payload carries that shipping reads.
type orderRef struct {
	OrderID uuid.UUID `json:"order_id"`
	Version int       `json:"version"`
}

// follow is the handler of the order event that means status: it records status and
// moves the order's shipment to the status that follows it when the event's version
// wins.
func (h handlers) follow(status shipping.Status) inbox.Handler {
	return func(ctx context.Context, tx pgx.Tx, env contracts.Envelope) error {
		var p orderRef
		if err := json.Unmarshal(env.Payload, &p); err != nil {
			return fmt.Errorf("decode %s payload: %w: %w", env.EventName, inbox.ErrPermanent, err)
		}
		c := shipping.StatusChange{OrderID: p.OrderID, Status: status, Version: p.Version}
		won, err := h.apply(ctx, tx, env, c)
		if err != nil || !won {
			return err
		}
		shipment, err := shipping.ShipmentStatusFor(status)
		if err != nil {
			return fmt.Errorf("%s: %w: %w", env.EventName, inbox.ErrPermanent, err)
		}
		return store.SetShipment(ctx, tx, p.OrderID, shipment)
	}
}

// apply runs store.ApplyStatus for c and reports whether c won. Only the payload
// version orders changes; env.EventID and env.OccurredAt play no part.
func (h handlers) apply(ctx context.Context, tx pgx.Tx, env contracts.Envelope, c shipping.StatusChange) (bool, error) {
	applied, err := store.ApplyStatus(ctx, tx, c)
	if errors.Is(err, shipping.ErrInvalidChange) {
		return false, fmt.Errorf("%s: %w: %w", env.EventName, inbox.ErrPermanent, err)
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", env.EventName, err)
	}
	if !applied {
		logging.WithEvent(h.logger, env.EventID.String(), env.CorrelationID).LogAttrs(ctx, slog.LevelInfo,
			"stale order event ignored: a version at least as new is already recorded",
			slog.String("event_name", env.EventName), slog.String("order_id", c.OrderID.String()), slog.Int("version", c.Version))
	}
	return applied, nil
}
