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
// It returns an error wrapping shipping.ErrInvalidChange for a change that can never be
// applied, and the database error otherwise. The caller owns tx (commit or roll back).
func ApplyStatus(ctx context.Context, tx pgx.Tx, c shipping.StatusChange) (applied bool, err error) {
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

// upsertShipment creates the order's shipment or moves it to the given status.
const upsertShipment = `
INSERT INTO shipment (id, order_id, status, created_at, updated_at)
VALUES ($1, $2, $3, now(), now())
ON CONFLICT (order_id) DO UPDATE
SET status = EXCLUDED.status, updated_at = EXCLUDED.updated_at
WHERE shipment.status IS DISTINCT FROM EXCLUDED.status`

// SetShipment brings the shipment of order orderID in tx to status: it creates the
// shipment (UUID v7 id) when the order has none and otherwise keeps its id and
// created_at. It runs after ApplyStatus won for the order, while tx holds the
// order_status row lock, so concurrent changes of one order apply in turn.
func SetShipment(ctx context.Context, tx pgx.Tx, orderID uuid.UUID, status shipping.ShipmentStatus) error {
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("new shipment id for order %s: %w", orderID, err)
	}
	if _, err := tx.Exec(ctx, upsertShipment, id, orderID, string(status)); err != nil {
		return fmt.Errorf("set shipment of order %s to %s: %w", orderID, status, err)
	}
	return nil
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
