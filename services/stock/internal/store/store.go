// Package store keeps the stock service's order_status and reservation rows in
// PostgreSQL.
package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"example.com/shop/services/stock/internal/stock"
)

// DB runs queries; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Store reads reservations. It holds no state but its DB and is safe for concurrent
// use when the DB is (a pool is).
type Store struct {
	db DB
}

// New returns a Store reading through db, usually the service's pool.
func New(db DB) *Store {
	return &Store{db: db}
}

// upsertStatus is the versioned upsert of docs/architecture.md, rule 4: it writes the
// change only when no row exists or the stored version is older, and returns a row only
// then. An equal version loses, so of two changes with the same version the first one
// stays. Two transactions that upsert the same order take turns on its row (or on its
// key, for a new row), so a statement that follows it in the same transaction runs only
// after any concurrent event of the same order has committed or rolled back.
const upsertStatus = `
INSERT INTO order_status (order_id, status, version, updated_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (order_id) DO UPDATE
SET status = EXCLUDED.status, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
WHERE order_status.version < EXCLUDED.version
RETURNING status`

// ApplyStatus records change c in tx when c.Version is newer than the stored version of
// its order, or no row exists yet (docs/architecture.md, rule 4), and reports whether it
// did. A stale change, or one with the same version as the stored row, changes nothing
// and returns applied=false with a nil error: the event is older than what is known.
//
// It returns an error wrapping stock.ErrInvalidChange for a change that can never be
// applied, and the database error otherwise. The caller owns tx (commit or roll back).
func ApplyStatus(ctx context.Context, tx pgx.Tx, c stock.StatusChange) (applied bool, err error) {
	if err := c.Validate(); err != nil {
		return false, err
	}
	var won string
	err = tx.QueryRow(ctx, upsertStatus, c.OrderID, string(c.Status), c.Version).Scan(&won)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // an equal or newer version is already there
	}
	if err != nil {
		return false, fmt.Errorf("upsert status of order %s to %s v%d: %w", c.OrderID, c.Status, c.Version, err)
	}
	return true, nil
}

const reserve = `INSERT INTO reservation (id, order_id, line_no, product_id, quantity)
SELECT r.id, r.order_id, r.line_no, r.product_id, r.quantity::numeric
FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::uuid[], $5::text[]) AS r(id, order_id, line_no, product_id, quantity)`

// Reserve inserts rs in tx, one reservation row each, in one statement. It runs after
// ApplyStatus won for their order, so concurrent events of the order apply in turn.
func Reserve(ctx context.Context, tx pgx.Tx, rs []stock.Reservation) error {
	if len(rs) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(rs))
	orders := make([]uuid.UUID, len(rs))
	lineNos := make([]int32, len(rs))
	products := make([]uuid.UUID, len(rs))
	quantities := make([]string, len(rs))
	for n, r := range rs {
		ids[n], orders[n], lineNos[n], products[n], quantities[n] = r.ID, r.OrderID, int32(r.LineNo), r.ProductID, r.Quantity
	}
	if _, err := tx.Exec(ctx, reserve, ids, orders, lineNos, products, quantities); err != nil {
		return fmt.Errorf("reserve order %s: %w", rs[0].OrderID, err)
	}
	return nil
}

// Release marks the held reservations of order orderID released in tx, with the time
// of the release; the rows stay, so a reader sees that the cancel took effect. It runs
// after ApplyStatus won for the order, as a statement of its own, so under READ
// COMMITTED it sees the reservations of a placed event that committed while tx waited
// for the order's row.
func Release(ctx context.Context, tx pgx.Tx, orderID uuid.UUID) error {
	const release = `UPDATE reservation SET status = 'released', released_at = now()
WHERE order_id = $1 AND status = 'held'`
	if _, err := tx.Exec(ctx, release, orderID); err != nil {
		return fmt.Errorf("release order %s: %w", orderID, err)
	}
	return nil
}

// Reservations returns the reservations of order orderID in line order, held and
// released, or an empty slice when stock never held anything for it.
func (s *Store) Reservations(ctx context.Context, orderID uuid.UUID) ([]stock.Reservation, error) {
	rows, err := s.db.Query(ctx, `SELECT id, order_id, line_no, product_id, quantity::text, status
FROM reservation WHERE order_id = $1 ORDER BY line_no`, orderID)
	if err != nil {
		return nil, fmt.Errorf("list reservations of order %s: %w", orderID, err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (stock.Reservation, error) {
		var r stock.Reservation
		err := row.Scan(&r.ID, &r.OrderID, &r.LineNo, &r.ProductID, &r.Quantity, &r.Status)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("list reservations of order %s: %w", orderID, err)
	}
	if list == nil {
		list = []stock.Reservation{}
	}
	return list, nil
}
