package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/services/order/internal/order"
)

// Stale is order's answer to `order dlq replay` (dlq.Stale): an answer of stock to
// a placement the order has moved on from (cancelled, answered already, or at another
// version: order.Answers is false) changes nothing here, as the handlers of Register
// ignore it (order.ErrAnswerOutdated); its note names the order's status and version.
// An answer the handlers fail instead (an unknown order, a rejection that can never
// apply) and any other event are not stale. It reads the order's status and version
// through tx (order_maintenance may read those columns).
func Stale(ctx context.Context, tx pgx.Tx, env contracts.Envelope) (string, error) {
	var p contracts.StockReservationRejected // order_id and order_version, as in a confirmation
	switch env.EventName {
	case contracts.EventStockReservationConfirmed:
		var c contracts.StockReservationConfirmed
		if err := json.Unmarshal(env.Payload, &c); err != nil {
			return "", nil //nolint:nilerr // a payload the handlers refuse is their verdict, not staleness
		}
		p.OrderID, p.OrderVersion = c.OrderID, c.OrderVersion
	case contracts.EventStockReservationRejected:
		if err := json.Unmarshal(env.Payload, &p); err != nil {
			return "", nil //nolint:nilerr // as above
		}
		r, err := RejectionFromContract(contracts.Rejection{Reason: p.Reason, Lines: p.Lines})
		if err != nil || r.Reason == "" || len(r.Lines) == 0 {
			return "", nil //nolint:nilerr // the handler fails it (order.ErrInvalidRejection): not stale
		}
	default:
		return "", nil
	}
	var status string
	var version int
	err := tx.QueryRow(ctx, `SELECT status, version FROM orders WHERE id = $1`, p.OrderID).Scan(&status, &version)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", nil // the handler fails it (order.ErrNotFound)
	case err != nil:
		return "", fmt.Errorf("read order %s: %w", p.OrderID, err)
	case order.Answers(order.Status(status), version, p.OrderVersion):
		return "", nil
	}
	return fmt.Sprintf("order %s at status %s, version %d; the answer is to version %d", p.OrderID, status, version, p.OrderVersion), nil
}
