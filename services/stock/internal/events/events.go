// Package events applies the order events to the stock database: the handlers of
// order.order.placed.v1 and order.order.cancelled.v1 that run inside the inbox's
// transaction.
package events

import (
	"context"
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
// store.ApplyStatus (docs/architecture.md, rule 4). Both are inbox.GroupHandlers: with
// group commit, the events of one name in a group are applied by a few set-based
// statements (store.ApplyPlaced, store.ApplyCancelled). Stale events are logged to
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
	inbox.OnGroup(in, contracts.EventOrderPlaced, h.placed)
	inbox.OnGroup(in, contracts.EventOrderCancelled, h.cancelled)
}

type handlers struct {
	logger *slog.Logger
}

// placed reserves each line of each order (one reservation row per line, UUID v7 ids)
// whose event's version wins; a stale event (its order already cancelled at a newer
// version) reserves nothing.
func (h handlers) placed(ctx context.Context, tx pgx.Tx, events []inbox.Event[contracts.OrderPlaced]) error {
	ps := make([]store.Placed, len(events))
	for n, e := range events {
		c := stock.StatusChange{OrderID: e.Payload.OrderID, Status: stock.StatusPlaced, Version: e.Payload.Version}
		if err := c.Validate(); err != nil {
			return inbox.EventFailed(n, fmt.Errorf("%s: %w: %w", e.EventName, inbox.ErrPermanent, err))
		}
		lines := make([]stock.Line, len(e.Payload.Lines))
		for k, l := range e.Payload.Lines {
			lines[k] = stock.Line{ProductID: l.ProductID, Quantity: l.Quantity}
		}
		rs, err := stock.Reserve(e.Payload.OrderID, lines)
		if err != nil {
			return inbox.EventFailed(n, err)
		}
		ps[n] = store.Placed{Change: c, Reservations: rs}
	}
	won, err := store.ApplyPlaced(ctx, tx, ps)
	if err != nil {
		return fmt.Errorf("%s: %w", contracts.EventOrderPlaced, err)
	}
	for n, w := range won {
		if !w {
			h.stale(ctx, events[n].Meta, ps[n].Change)
		}
	}
	return nil
}

// cancelled releases the reservations of each order (marks them released) whose
// event's version wins.
func (h handlers) cancelled(ctx context.Context, tx pgx.Tx, events []inbox.Event[contracts.OrderCancelled]) error {
	cs := make([]stock.StatusChange, len(events))
	for n, e := range events {
		cs[n] = stock.StatusChange{OrderID: e.Payload.OrderID, Status: stock.StatusCancelled, Version: e.Payload.Version}
		if err := cs[n].Validate(); err != nil {
			return inbox.EventFailed(n, fmt.Errorf("%s: %w: %w", e.EventName, inbox.ErrPermanent, err))
		}
	}
	won, err := store.ApplyCancelled(ctx, tx, cs)
	if err != nil {
		return fmt.Errorf("%s: %w", contracts.EventOrderCancelled, err)
	}
	for n, w := range won {
		if !w {
			h.stale(ctx, events[n].Meta, cs[n])
		}
	}
	return nil
}

// stale logs an event whose change lost to a version at least as new. Only the
// payload version orders changes; the event's id and occurred_at play no part.
func (h handlers) stale(ctx context.Context, m inbox.Meta, c stock.StatusChange) {
	logging.WithEvent(h.logger, m.EventID.String(), m.CorrelationID).LogAttrs(ctx, slog.LevelInfo,
		"stale order event ignored: a version at least as new is already recorded",
		slog.String("event_name", m.EventName), slog.String("order_id", c.OrderID.String()), slog.Int("version", c.Version))
}
