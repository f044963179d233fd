// Package events applies the order events to the stock database: the handlers of
// order.order.placed.v1 and order.order.cancelled.v1 that run inside the inbox's
// transaction.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/services/stock/internal/stock"
	"example.com/shop/services/stock/internal/store"
)

// Consumer is the name stock records its processed_event keys under.
const Consumer = contracts.ConsumerStock

// Register adds the stock handlers to in: order.order.placed.v1 reserves every line
// of the order, order.order.cancelled.v1 releases them, each only when its version wins
// store.ApplyStatus (docs/architecture.md, rule 4). Stale events are logged to logger at
// info level (nil discards) and acknowledged: they are not failures. A payload that
// does not decode, or a change that can never apply, is an error wrapping
// inbox.ErrPermanent (dead-lettered at once); a database error is returned as it is,
// for the inbox to retry or to wait out (rule 3).
func Register(in *inbox.Inbox, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := handlers{logger: logger}
	in.Register(contracts.EventOrderPlaced, h.placed)
	in.Register(contracts.EventOrderCancelled, h.cancelled)
}

type handlers struct {
	logger *slog.Logger
}

// placed reserves each line of the order (one reservation row per line, UUID v7 ids)
// when the event's version wins; a stale event (its order already cancelled at a newer
// version) reserves nothing.
func (h handlers) placed(ctx context.Context, tx pgx.Tx, env contracts.Envelope) error {
	var p contracts.OrderPlaced
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return fmt.Errorf("decode %s payload: %w: %w", env.EventName, inbox.ErrPermanent, err)
	}
	won, err := h.apply(ctx, tx, env, stock.StatusChange{OrderID: p.OrderID, Status: stock.StatusPlaced, Version: p.Version})
	if err != nil || !won {
		return err
	}
	lines := make([]stock.Line, len(p.Lines))
	for n, l := range p.Lines {
		lines[n] = stock.Line{ProductID: l.ProductID, Quantity: l.Quantity}
	}
	rs, err := stock.Reserve(p.OrderID, lines)
	if err != nil {
		return err
	}
	return store.Reserve(ctx, tx, rs)
}

// cancelled releases the order's reservations (marks them released) when the event's version wins.
func (h handlers) cancelled(ctx context.Context, tx pgx.Tx, env contracts.Envelope) error {
	var p contracts.OrderCancelled
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return fmt.Errorf("decode %s payload: %w: %w", env.EventName, inbox.ErrPermanent, err)
	}
	won, err := h.apply(ctx, tx, env, stock.StatusChange{OrderID: p.OrderID, Status: stock.StatusCancelled, Version: p.Version})
	if err != nil || !won {
		return err
	}
	return store.Release(ctx, tx, p.OrderID)
}

// apply runs store.ApplyStatus for c and reports whether c won. Only the payload
// version orders changes; env.EventID and env.OccurredAt play no part.
func (h handlers) apply(ctx context.Context, tx pgx.Tx, env contracts.Envelope, c stock.StatusChange) (bool, error) {
	applied, err := store.ApplyStatus(ctx, tx, c)
	if errors.Is(err, stock.ErrInvalidChange) {
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
