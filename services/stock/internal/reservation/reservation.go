// Package reservation holds stock for placed orders: it reserves every line of an order
// when order.order.placed.v1 arrives, releases them when order.order.cancelled.v1
// arrives, and lists an order's reservations for the HTTP API.
package reservation

import (
	"context"
	"encoding/json"
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
// handles, with its dead-letter queue stock.events.dlq (DESIGN.md "Messaging"). It has
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

// reserve inserts one reservation per line in one statement, unless the order was
// cancelled at a version after this one (the cancel event overtook this event).
const reserve = `INSERT INTO reservation (id, order_id, line_no, product_id, quantity)
SELECT l.id, $1, l.line_no, l.product_id, l.quantity::numeric
FROM unnest($2::uuid[], $3::uuid[], $4::text[]) WITH ORDINALITY AS l(id, product_id, quantity, line_no)
WHERE NOT EXISTS (SELECT 1 FROM cancelled_order c WHERE c.order_id = $1 AND c.version > $5)`

// OnOrderPlaced is the inbox.Handler of order.order.placed.v1: it reserves each line of
// the order, one row per line, in tx. Running it twice for one order fails on the
// unique (order_id, line_no) constraint; the inbox makes sure it runs once per event.
// An order already cancelled at a later version gets no reservation.
func OnOrderPlaced(ctx context.Context, tx pgx.Tx, env contracts.Envelope) error {
	var p contracts.OrderPlaced
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return fmt.Errorf("decode %s payload: %w", env.EventName, err)
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
	if _, err := tx.Exec(ctx, reserve, p.OrderID, ids, products, quantities, p.Version); err != nil {
		return fmt.Errorf("reserve order %s: %w", p.OrderID, err)
	}
	return nil
}

// release records the cancellation (keeping the highest version) and deletes the
// order's reservations.
const release = `WITH cancelled AS (
    INSERT INTO cancelled_order (order_id, version) VALUES ($1, $2)
    ON CONFLICT (order_id) DO UPDATE SET version = greatest(cancelled_order.version, EXCLUDED.version)
)
DELETE FROM reservation WHERE order_id = $1`

// OnOrderCancelled is the inbox.Handler of order.order.cancelled.v1: it deletes every
// reservation of the order in tx and remembers the cancellation, so a placed event
// delivered later reserves nothing.
func OnOrderCancelled(ctx context.Context, tx pgx.Tx, env contracts.Envelope) error {
	var p contracts.OrderCancelled
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return fmt.Errorf("decode %s payload: %w", env.EventName, err)
	}
	if _, err := tx.Exec(ctx, release, p.OrderID, p.Version); err != nil {
		return fmt.Errorf("release order %s: %w", p.OrderID, err)
	}
	return nil
}

// Querier runs a query; *pgxpool.Pool and pgx.Tx satisfy it.
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
