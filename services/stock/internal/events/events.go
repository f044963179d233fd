// Package events applies the order events to the stock database: the handlers of
// order.order.placed.v1 and order.order.cancelled.v1 that run inside the inbox's
// transaction, and stock's answer to each placed order, written to its outbox in that
// same transaction.
package events

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/stock/internal/stock"
	"example.com/shop/services/stock/internal/store"
)

// Consumer is the name stock records its processed_event keys under.
const Consumer = contracts.ConsumerStock

// Register adds the stock handlers to in: order.order.placed.v1 reserves every line
// of the order or none (docs/architecture.md, rule 6) and writes stock's answer through
// w (stock.reservation.confirmed.v1 or stock.reservation.rejected.v1, with the order id
// as aggregate key and the placed event's correlation id) in the inbox's transaction, so
// the answer, the reservations and the event's processed_event key commit together;
// order.order.cancelled.v1 releases what is held. Each applies only when its version
// wins store.ApplyStatus (docs/architecture.md, rule 4); a stale placed event holds
// nothing and answers nothing (its order has moved on). Both are inbox.GroupHandlers: with
// group commit, the events of one name in a group are applied by a few set-based
// statements (store.ApplyPlaced, store.ApplyCancelled). Stale events are logged to
// logger at info level (nil discards) and acknowledged: they are not failures. A
// change that can never apply fails its event alone with an error wrapping
// inbox.ErrPermanent (dead-lettered at once; the inbox does the same for a payload
// that does not decode); a database error is returned as it is, for the inbox to
// retry or to wait out (rule 3).
func Register(in *inbox.Inbox, w *outbox.Writer, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := handlers{outbox: w, logger: logger}
	inbox.OnGroup(in, contracts.EventOrderPlaced, h.placed)
	inbox.OnGroup(in, contracts.EventOrderCancelled, h.cancelled)
}

type handlers struct {
	outbox *outbox.Writer
	logger *slog.Logger
}

// placed decides each order whose event's version wins, all or nothing, and answers it;
// a stale event (its order already cancelled at a newer version) reserves nothing.
func (h handlers) placed(ctx context.Context, tx pgx.Tx, events []inbox.Event[contracts.OrderPlaced]) error {
	ps := make([]store.Placed, len(events))
	for n, e := range events {
		c := stock.StatusChange{OrderID: e.Payload.OrderID, Status: stock.StatusPlaced, Version: e.Payload.Version}
		if err := c.Validate(); err != nil {
			return inbox.EventFailed(n, fmt.Errorf("%s: %w: %w", e.EventName, inbox.ErrPermanent, err))
		}
		lines := make([]stock.Line, len(e.Payload.Lines))
		for k, l := range e.Payload.Lines {
			if _, err := stock.ParseQuantity(l.Quantity); err != nil {
				return inbox.EventFailed(n, fmt.Errorf("%s line %d: %w: %w", e.EventName, k+1, inbox.ErrPermanent, err))
			}
			lines[k] = stock.Line{ProductID: l.ProductID, Quantity: l.Quantity}
		}
		ps[n] = store.Placed{Change: c, Lines: lines}
	}
	ds, err := store.ApplyPlaced(ctx, tx, ps)
	if err != nil {
		return fmt.Errorf("%s: %w", contracts.EventOrderPlaced, err)
	}
	answers := make([]outbox.Entry, 0, len(ds))
	for n, d := range ds {
		if !d.Won {
			h.stale(ctx, events[n].Meta, ps[n].Change)
			continue
		}
		name, payload := Answer(ps[n].Change, d)
		e, err := h.outbox.Prepare(ctx, name, ps[n].Change.OrderID.String(), events[n].CorrelationID, payload)
		if err != nil { // the answer breaks the contract, and always will: this event alone fails
			return inbox.EventFailed(n, fmt.Errorf("%s: write %s: %w: %w", events[n].EventName, name, inbox.ErrPermanent, err))
		}
		answers = append(answers, e)
	}
	if err := h.outbox.Insert(ctx, tx, answers...); err != nil {
		return fmt.Errorf("%s: write answers: %w", contracts.EventOrderPlaced, err) // the database: the group retries
	}
	return nil
}

// Answer is stock's answer to the placed change c that store.ApplyPlaced decided as d
// (d.Won): stock.reservation.confirmed.v1 with the held lines (quantities with three
// fraction digits) when d.Confirmed(), else stock.reservation.rejected.v1 with reason
// insufficient_stock and the short lines. Both carry c.Version as order_version.
func Answer(c stock.StatusChange, d store.Decision) (name string, payload any) {
	if d.Confirmed() {
		lines := make([]contracts.OrderLine, len(d.Reservations))
		for k, r := range d.Reservations {
			lines[k] = contracts.OrderLine{ProductID: r.ProductID, Quantity: r.Quantity}
		}
		return contracts.EventStockReservationConfirmed,
			contracts.StockReservationConfirmed{OrderID: c.OrderID, OrderVersion: c.Version, Lines: lines}
	}
	short := make([]contracts.ShortLine, len(d.Short))
	for k, l := range d.Short {
		short[k] = contracts.ShortLine{ProductID: l.ProductID, Requested: l.Requested.String(), Available: l.Available.String()}
	}
	return contracts.EventStockReservationRejected, contracts.StockReservationRejected{
		OrderID: c.OrderID, OrderVersion: c.Version, Reason: contracts.RejectionInsufficientStock, Lines: short}
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
