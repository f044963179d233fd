// Package store keeps the shipping service's order_status and shipment rows in
// PostgreSQL.
package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"example.com/shop/platform/inbox"
	"example.com/shop/services/shipping/internal/shipping"
)

// DB runs queries; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads order statuses and shipments. It holds no state but its DB and
// is safe for concurrent use when the DB is (a pool is).
type Store struct {
	db DB
}

// New returns a Store reading through db, usually the service's pool.
func New(db DB) *Store {
	return &Store{db: db}
}

// applyRound is the versioned upsert of docs/architecture.md, rule 4, for one round of
// distinct orders ($1 order ids, $2 statuses, $3 versions), followed in the same
// statement by the shipments of the orders whose change won ($4 new shipment ids,
// $5 shipment statuses; a new shipment only takes its id). A change is written only
// when no row exists or the stored version is older; an equal version loses, so of
// two changes with the same version the first one stays. The statement returns the
// orders that won. Rows are locked in order id order, so concurrent transactions
// take turns on an order's row (or key) without deadlocking on each other, and a
// transaction's shipment write runs only after any concurrent change of the same
// order has committed or rolled back.
const applyRound = `
WITH c AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::uuid[], $5::text[])
		AS c(order_id, status, version, shipment_id, shipment_status)
), won AS (
	INSERT INTO order_status AS s (order_id, status, version, updated_at)
	SELECT order_id, status, version, now() FROM c ORDER BY order_id
	ON CONFLICT (order_id) DO UPDATE
	SET status = EXCLUDED.status, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
	WHERE s.version < EXCLUDED.version
	RETURNING s.order_id
), shipped AS (
	INSERT INTO shipment AS sh (id, order_id, status, created_at, updated_at)
	SELECT c.shipment_id, c.order_id, c.shipment_status, now(), now()
	FROM c JOIN won USING (order_id) ORDER BY c.order_id
	ON CONFLICT (order_id) DO UPDATE
	SET status = EXCLUDED.status, updated_at = EXCLUDED.updated_at
	WHERE sh.status IS DISTINCT FROM EXCLUDED.status
)
SELECT order_id FROM won`

// Apply records the changes cs in tx and brings the shipment of each order whose
// change won in step (shipping.ShipmentStatusFor: created with a UUID v7 id when the
// order has none, else moved, keeping its id and created_at). A change wins when its
// version is newer than the stored version of its order, or no row exists yet
// (docs/architecture.md, rule 4); won[n] reports whether cs[n] did. A stale change,
// or one with the same version as the stored row, changes nothing: its event is older
// than what is known. The changes of one order apply in the order of cs.
//
// It is set-based: one statement per round of distinct orders (inbox.Rounds), so a
// group of events from the inbox costs a round trip or two, not two per event.
//
// It returns an error wrapping shipping.ErrInvalidChange for a change that can never
// be applied (nothing written), and the database error otherwise, for the whole of
// cs. The caller owns tx (commit or roll back).
func Apply(ctx context.Context, tx pgx.Tx, cs []shipping.StatusChange) (won []bool, err error) {
	shipments := make([]string, len(cs))
	for n, c := range cs {
		if err := c.Validate(); err != nil {
			return nil, err
		}
		sh, err := shipping.ShipmentStatusFor(c.Status)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", shipping.ErrInvalidChange, err)
		}
		shipments[n] = string(sh)
	}
	won = make([]bool, len(cs))
	for _, round := range inbox.Rounds(len(cs), func(n int) uuid.UUID { return cs[n].OrderID }) {
		orders, ids := make([]pgtype.UUID, len(round)), make([]pgtype.UUID, len(round))
		statuses, versions, shipped := make([]string, len(round)), make([]int32, len(round)), make([]string, len(round))
		for k, n := range round {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("new shipment id for order %s: %w", cs[n].OrderID, err)
			}
			orders[k], ids[k] = pgtype.UUID{Bytes: cs[n].OrderID, Valid: true}, pgtype.UUID{Bytes: id, Valid: true}
			statuses[k], versions[k], shipped[k] = string(cs[n].Status), int32(cs[n].Version), shipments[n]
		}
		rows, err := tx.Query(ctx, applyRound, orders, statuses, versions, ids, shipped)
		if err != nil {
			return nil, fmt.Errorf("apply %d order changes: %w", len(round), err)
		}
		winners, err := pgx.CollectRows(rows, pgx.RowTo[pgtype.UUID])
		if err != nil {
			return nil, fmt.Errorf("apply %d order changes: %w", len(round), err)
		}
		wonOrders := make(map[uuid.UUID]bool, len(winners))
		for _, w := range winners {
			wonOrders[w.Bytes] = true
		}
		for _, n := range round {
			won[n] = wonOrders[cs[n].OrderID]
		}
	}
	return won, nil
}

// OrderStatus returns the stored status of order orderID, or an error wrapping
// shipping.ErrNotFound when none is known.
func (s *Store) OrderStatus(ctx context.Context, orderID uuid.UUID) (shipping.OrderStatus, error) {
	var os shipping.OrderStatus
	var status string
	err := s.db.QueryRow(ctx,
		`SELECT order_id, status, version, updated_at FROM order_status WHERE order_id = $1`, orderID,
	).Scan(&os.OrderID, &status, &os.Version, &os.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return shipping.OrderStatus{}, fmt.Errorf("order status %s: %w", orderID, shipping.ErrNotFound)
	}
	if err != nil {
		return shipping.OrderStatus{}, fmt.Errorf("read order status %s: %w", orderID, err)
	}
	os.Status = shipping.Status(status)
	return os, nil
}

// Shipment returns the shipment of order orderID, or an error wrapping
// shipping.ErrNotFound when the order has none.
func (s *Store) Shipment(ctx context.Context, orderID uuid.UUID) (shipping.Shipment, error) {
	var sh shipping.Shipment
	var status string
	err := s.db.QueryRow(ctx,
		`SELECT id, order_id, status, created_at, updated_at FROM shipment WHERE order_id = $1`, orderID,
	).Scan(&sh.ID, &sh.OrderID, &status, &sh.CreatedAt, &sh.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return shipping.Shipment{}, fmt.Errorf("shipment of order %s: %w", orderID, shipping.ErrNotFound)
	}
	if err != nil {
		return shipping.Shipment{}, fmt.Errorf("read shipment of order %s: %w", orderID, err)
	}
	sh.Status = shipping.ShipmentStatus(status)
	return sh, nil
}

// StatusVersion returns the stored version of order orderID's status, read through
// tx; found is false when none is stored.
func StatusVersion(ctx context.Context, tx pgx.Tx, orderID uuid.UUID) (version int, found bool, err error) {
	err = tx.QueryRow(ctx, `SELECT version FROM order_status WHERE order_id = $1`, orderID).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read order status version %s: %w", orderID, err)
	}
	return version, true, nil
}
