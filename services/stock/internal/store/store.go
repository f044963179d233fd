// Package store keeps the stock service's order_status and reservation rows in
// PostgreSQL.
package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

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

// Placed is the effect of one placed event: its status change and the reservations
// that hold its lines when the change wins.
type Placed struct {
	Change       stock.StatusChange // Status is stock.StatusPlaced
	Reservations []stock.Reservation
}

// placeOrders is upsertStatus for many orders of one round (no order twice), in
// order id order so that concurrent transactions lock the rows in one order, with
// the reservations of the changes that won inserted by the same statement. The
// reservations wait for the row lock of their order like the upsert: an event of
// the same order in a concurrent transaction has committed or rolled back first.
const placeOrders = `
WITH won AS (
	INSERT INTO order_status AS s (order_id, status, version, updated_at)
	SELECT c.order_id, 'placed', c.version, now()
	FROM unnest($1::uuid[], $2::int[]) AS c(order_id, version)
	ORDER BY c.order_id
	ON CONFLICT (order_id) DO UPDATE
	SET status = EXCLUDED.status, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
	WHERE s.version < EXCLUDED.version
	RETURNING s.order_id
), reserved AS (
	INSERT INTO reservation (id, order_id, line_no, product_id, quantity)
	SELECT r.id, r.order_id, r.line_no, r.product_id, r.quantity::numeric
	FROM unnest($3::uuid[], $4::uuid[], $5::int[], $6::uuid[], $7::text[]) AS r(id, order_id, line_no, product_id, quantity)
	WHERE r.order_id IN (SELECT order_id FROM won)
)
SELECT order_id FROM won`

// ApplyPlaced records the placed changes ps in tx, each as ApplyStatus would (rule 4
// of docs/architecture.md: only a newer version wins), and inserts the reservations
// of each change that won, in set-based statements: one per round of distinct
// orders, so one statement for events of different orders. Changes of one order
// apply in the order of ps. won[n] reports whether ps[n] won.
//
// It returns an error wrapping stock.ErrInvalidChange when a change can never be
// applied (nothing written), and the database error otherwise, for the whole of ps.
// The caller owns tx.
func ApplyPlaced(ctx context.Context, tx pgx.Tx, ps []Placed) (won []bool, err error) {
	for _, p := range ps {
		if err := p.Change.Validate(); err != nil {
			return nil, err
		}
	}
	won = make([]bool, len(ps))
	for _, round := range rounds(len(ps), func(n int) uuid.UUID { return ps[n].Change.OrderID }) {
		var (
			orders   = make([]pgtype.UUID, len(round))
			versions = make([]int32, len(round))
			ids      []pgtype.UUID
			rOrders  []pgtype.UUID
			lineNos  []int32
			products []pgtype.UUID
			qty      []string
		)
		for k, n := range round {
			orders[k], versions[k] = pgUUID(ps[n].Change.OrderID), int32(ps[n].Change.Version)
			for _, r := range ps[n].Reservations {
				ids, rOrders = append(ids, pgUUID(r.ID)), append(rOrders, pgUUID(r.OrderID))
				lineNos, products, qty = append(lineNos, int32(r.LineNo)), append(products, pgUUID(r.ProductID)), append(qty, r.Quantity)
			}
		}
		if err := collectWinners(ctx, tx, round, won, func(n int) uuid.UUID { return ps[n].Change.OrderID },
			placeOrders, orders, versions, ids, rOrders, lineNos, products, qty); err != nil {
			return nil, fmt.Errorf("place %d orders: %w", len(round), err)
		}
	}
	return won, nil
}

// cancelOrders is upsertStatus for many orders of one round, as placeOrders.
const cancelOrders = `
INSERT INTO order_status AS s (order_id, status, version, updated_at)
SELECT c.order_id, 'cancelled', c.version, now()
FROM unnest($1::uuid[], $2::int[]) AS c(order_id, version)
ORDER BY c.order_id
ON CONFLICT (order_id) DO UPDATE
SET status = EXCLUDED.status, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
WHERE s.version < EXCLUDED.version
RETURNING s.order_id`

// releaseOrders is Release for many orders.
const releaseOrders = `UPDATE reservation SET status = 'released', released_at = now()
WHERE order_id = ANY($1::uuid[]) AND status = 'held'`

// ApplyCancelled records the cancelled changes cs in tx, each as ApplyStatus would,
// and releases the held reservations of every order whose change won, as Release
// does: the release is a statement of its own after the upsert, so it sees the
// reservations of a placed event that committed while tx waited for the order's row.
// Two statements per round of distinct orders. won[n] reports whether cs[n] won;
// errors are those of ApplyPlaced.
func ApplyCancelled(ctx context.Context, tx pgx.Tx, cs []stock.StatusChange) (won []bool, err error) {
	for _, c := range cs {
		if err := c.Validate(); err != nil {
			return nil, err
		}
	}
	won = make([]bool, len(cs))
	for _, round := range rounds(len(cs), func(n int) uuid.UUID { return cs[n].OrderID }) {
		orders, versions := make([]pgtype.UUID, len(round)), make([]int32, len(round))
		for k, n := range round {
			orders[k], versions[k] = pgUUID(cs[n].OrderID), int32(cs[n].Version)
		}
		if err := collectWinners(ctx, tx, round, won, func(n int) uuid.UUID { return cs[n].OrderID },
			cancelOrders, orders, versions); err != nil {
			return nil, fmt.Errorf("cancel %d orders: %w", len(round), err)
		}
		released := orders[:0]
		for _, n := range round {
			if won[n] {
				released = append(released, pgUUID(cs[n].OrderID))
			}
		}
		if len(released) == 0 {
			continue
		}
		if _, err := tx.Exec(ctx, releaseOrders, released); err != nil {
			return nil, fmt.Errorf("release %d orders: %w", len(released), err)
		}
	}
	return won, nil
}

// collectWinners runs sql, which returns the order ids that won, and sets won[n]
// for each member n of round whose order is among them.
func collectWinners(ctx context.Context, tx pgx.Tx, round []int, won []bool, order func(n int) uuid.UUID, sql string, args ...any) error {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	winners := make(map[uuid.UUID]bool, len(round))
	var id pgtype.UUID
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		winners[id.Bytes] = true
		return nil
	}); err != nil {
		return err
	}
	for _, n := range round {
		won[n] = winners[order(n)]
	}
	return nil
}

// rounds splits the indexes 0..n-1 into rounds in which no order appears twice:
// the k-th change of an order goes to round k, so changes of one order apply in
// their order and a multi-row upsert never touches a row twice.
func rounds(n int, order func(int) uuid.UUID) [][]int {
	out := [][]int{make([]int, 0, n)}
	seen := make(map[uuid.UUID]int, n)
	for i := range n {
		k := seen[order(i)]
		seen[order(i)] = k + 1
		if k == len(out) {
			out = append(out, nil)
		}
		out[k] = append(out[k], i)
	}
	return out
}

// pgUUID is id as pgx encodes it without a detour through its text form.
func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

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
