// Package reservation holds stock for placed orders: it reserves every line of an order
// when order.order.placed.v1 arrives, releases them when order.order.cancelled.v1
// arrives, and lists an order's reservations for the HTTP API.
package reservation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
)

// Consumer is the name the stock service records its processed_event keys under.
const Consumer = "stock"

// Reservation is the stock held for one order line.
type Reservation struct {
	ID        uuid.UUID // UUID v7
	OrderID   uuid.UUID
	LineNo    int // position of the line in the order, from 1
	ProductID uuid.UUID
	Quantity  string // decimal with three fraction digits, such as "2.000"
}

// Queue returns the stock service's queue: stock.events bound to the events Register
// handles, with its dead-letter queue stock.events.dlq (docs/architecture.md, "The flow"). It has
// no retry delays; consumerapp.Topology adds the configured ones.
func Queue() amqp.QueueSpec {
	return amqp.QueueSpec{
		Name:            contracts.QueueStock,
		DeadLetterQueue: contracts.QueueStockDLQ,
		RoutingKeys:     []string{contracts.EventOrderPlaced, contracts.EventOrderCancelled},
	}
}

// Register adds the stock handlers to ib: OnOrderPlaced for order.order.placed.v1 and
// OnOrderCancelled for order.order.cancelled.v1.
func Register(ib *inbox.Inbox) {
	ib.Register(contracts.EventOrderPlaced, OnOrderPlaced)
	ib.Register(contracts.EventOrderCancelled, OnOrderCancelled)
}

// applyStatus is the versioned upsert of docs/architecture.md, rule 4 on stock's copy of the
// order's status: it writes ($2, $3) only when no row exists or the stored version is
// older, and returns a row only then. Two transactions that upsert the same order
// take turns on its row (or on its key, for a new row), so the statement that
// follows it in the same transaction runs only after any concurrent event of the
// same order has committed or rolled back.
const applyStatus = `INSERT INTO order_status (order_id, status, version) VALUES ($1, $2, $3)
ON CONFLICT (order_id) DO UPDATE
    SET status = EXCLUDED.status, version = EXCLUDED.version, updated_at = now()
    WHERE order_status.version < EXCLUDED.version
RETURNING true`

// won runs applyStatus and reports whether this event's version was applied.
func won(ctx context.Context, tx pgx.Tx, orderID uuid.UUID, status string, version int) (bool, error) {
	var applied bool
	err := tx.QueryRow(ctx, applyStatus, orderID, status, version).Scan(&applied)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // an equal or newer version is already there
	}
	if err != nil {
		return false, fmt.Errorf("order %s status %s v%d: %w", orderID, status, version, err)
	}
	return applied, nil
}

const reserve = `INSERT INTO reservation (id, order_id, line_no, product_id, quantity)
SELECT l.id, $1, l.line_no, l.product_id, l.quantity::numeric
FROM unnest($2::uuid[], $3::uuid[], $4::text[]) WITH ORDINALITY AS l(id, product_id, quantity, line_no)`

// OnOrderPlaced is the inbox handler of order.order.placed.v1: when the event's
// version wins stock's order_status row, it reserves each line of the order (one
// reservation row per line, UUID v7 ids); a stale event (its order already cancelled
// at a newer version) reserves nothing. It runs in the inbox transaction (docs/architecture.md,
// rule 3) and returns the database error, if any, for the runtime to retry.
func OnOrderPlaced(ctx context.Context, tx pgx.Tx, env contracts.Envelope) error {
	var p contracts.OrderPlaced
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return fmt.Errorf("decode %s payload: %w", env.EventName, err)
	}
	ok, err := won(ctx, tx, p.OrderID, "placed", p.Version)
	if err != nil || !ok {
		return err
	}
	ids := make([]uuid.UUID, len(p.Lines))
	products := make([]uuid.UUID, len(p.Lines))
	quantities := make([]string, len(p.Lines))
	for n, l := range p.Lines {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("reservation id: %w", err)
		}
		ids[n], products[n], quantities[n] = id, l.ProductID, l.Quantity
	}
	if _, err := tx.Exec(ctx, reserve, p.OrderID, ids, products, quantities); err != nil {
		return fmt.Errorf("reserve order %s: %w", p.OrderID, err)
	}
	return nil
}

// OnOrderCancelled is the inbox handler of order.order.cancelled.v1: when the
// event's version wins stock's order_status row, it releases (deletes) the order's
// reservations. The delete is a statement of its own after the upsert, so under READ
// COMMITTED it sees the reservations of a placed event that committed while this
// transaction waited for the order's row.
func OnOrderCancelled(ctx context.Context, tx pgx.Tx, env contracts.Envelope) error {
	var p contracts.OrderCancelled
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return fmt.Errorf("decode %s payload: %w", env.EventName, err)
	}
	ok, err := won(ctx, tx, p.OrderID, "cancelled", p.Version)
	if err != nil || !ok {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM reservation WHERE order_id = $1`, p.OrderID); err != nil {
		return fmt.Errorf("release order %s: %w", p.OrderID, err)
	}
	return nil
}

type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ListByOrder returns the reservations of orderID in line order, or an empty slice.
func ListByOrder(ctx context.Context, db Querier, orderID uuid.UUID) ([]Reservation, error) {
	rows, err := db.Query(ctx, `SELECT id, order_id, line_no, product_id, quantity::text
FROM reservation WHERE order_id = $1 ORDER BY line_no`, orderID)
	if err != nil {
		return nil, fmt.Errorf("list reservations of order %s: %w", orderID, err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Reservation, error) {
		var r Reservation
		err := row.Scan(&r.ID, &r.OrderID, &r.LineNo, &r.ProductID, &r.Quantity)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("list reservations of order %s: %w", orderID, err)
	}
	if list == nil {
		list = []Reservation{}
	}
	return list, nil
}
