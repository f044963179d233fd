package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/services/order/internal/order"
)

// Consumer is the name order records the processed_event keys of stock's answers under.
const Consumer = contracts.ConsumerOrder

// UpdateFunc changes order id inside tx, the inbox's transaction: it locks the order,
// calls fn and, when fn changed it, saves it and writes the events its transitions
// recorded to the outbox, all in tx. store.(*Store).UpdateInTx is one; it returns an
// error wrapping order.ErrNotFound for an unknown order.
type UpdateFunc func(ctx context.Context, tx pgx.Tx, id uuid.UUID, fn func(*order.Order) error) error

// Register adds order's handlers of stock's answers to in (docs/architecture.md, rules 3
// and 7): stock.reservation.confirmed.v1 confirms the placed order it answers,
// stock.reservation.rejected.v1 rejects it and keeps the rejection; each writes its own
// event (order.order.confirmed.v1, order.order.rejected.v1) through update, in the
// inbox's transaction, so the move, the event and the answer's processed_event key
// commit together. An answer for an order that has moved on (cancelled, answered
// already, or at another version than the one answered) changes nothing: it is logged
// to logger at info level as ignored, and acknowledged. Nothing is held for such an
// order at stock's end either: the cancel that moved it on releases what the answer
// held, whichever arrives first at stock (rule 4).
//
// An answer for an unknown order, or a rejection that can never apply, fails with an
// error wrapping inbox.ErrPermanent (the inbox does the same for a payload that does
// not decode) (dead-lettered at
// once); a database error is returned as it is, for the inbox to retry (rule 3). now
// stamps updated_at (nil: time.Now).
func Register(in *inbox.Inbox, update UpdateFunc, logger *slog.Logger, now func() time.Time) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	a := answers{update: update, logger: logger, now: now}
	inbox.On(in, contracts.EventStockReservationConfirmed, a.confirmed)
	inbox.On(in, contracts.EventStockReservationRejected, a.rejected)
}

type answers struct {
	update UpdateFunc
	logger *slog.Logger
	now    func() time.Time
}

func (a answers) confirmed(ctx context.Context, tx pgx.Tx, m inbox.Meta, p contracts.StockReservationConfirmed) error {
	return a.apply(ctx, tx, m, p.OrderID, p.OrderVersion, func(o *order.Order) error {
		return o.Confirm(p.OrderVersion, a.now())
	})
}

func (a answers) rejected(ctx context.Context, tx pgx.Tx, m inbox.Meta, p contracts.StockReservationRejected) error {
	r, err := RejectionFromContract(contracts.Rejection{Reason: p.Reason, Lines: p.Lines})
	if err != nil {
		return fmt.Errorf("%s: %w: %w", m.EventName, inbox.ErrPermanent, err)
	}
	return a.apply(ctx, tx, m, p.OrderID, p.OrderVersion, func(o *order.Order) error {
		return o.Reject(p.OrderVersion, r, a.now())
	})
}

// apply runs move on the order under its row lock; an outdated answer is logged and
// changes nothing.
func (a answers) apply(ctx context.Context, tx pgx.Tx, m inbox.Meta, id uuid.UUID, answered int, move func(*order.Order) error) error {
	var outdated error
	var status order.Status
	var version int
	err := a.update(ctx, tx, id, func(o *order.Order) error {
		status, version = o.Status(), o.Version()
		err := move(o)
		if errors.Is(err, order.ErrAnswerOutdated) {
			outdated = err
			return nil // nothing changed: the store saves nothing
		}
		return err
	})
	switch {
	case errors.Is(err, order.ErrNotFound), errors.Is(err, order.ErrInvalidRejection):
		return fmt.Errorf("%s for order %s: %w: %w", m.EventName, id, inbox.ErrPermanent, err)
	case err != nil:
		return fmt.Errorf("%s for order %s: %w", m.EventName, id, err)
	case outdated != nil:
		logging.WithEvent(a.logger, m.EventID.String(), m.CorrelationID).LogAttrs(ctx, slog.LevelInfo,
			"stock answer ignored: the order has moved on from the placement it answers",
			slog.String("event_name", m.EventName), slog.String("order_id", id.String()),
			slog.Int("answered_version", answered), slog.String("status", string(status)), slog.Int("version", version))
	}
	return nil
}
