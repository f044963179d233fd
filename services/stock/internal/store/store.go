// Package store keeps the stock service's order_status, reservation and product_stock
// rows in PostgreSQL.
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
	"example.com/shop/services/stock/internal/stock"
)

// DB runs queries; *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads reservations and stock rows and sets on-hand quantities. It holds no state but its DB and is safe for concurrent
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

// Reserve decides the placed order c with the lines lines as ApplyPlaced does, for one
// order, after ApplyStatus won for it in tx: it locks the stock rows of the lines'
// tracked products and, when every line fits, holds them all (reservations returned, short
// nil); otherwise it holds nothing and returns the short lines.
func Reserve(ctx context.Context, tx pgx.Tx, orderID uuid.UUID, lines []stock.Line) (rs []stock.Reservation, short []stock.Short, err error) {
	ds, err := decide(ctx, tx, []uuid.UUID{orderID}, [][]stock.Line{lines})
	if err != nil {
		return nil, nil, fmt.Errorf("reserve order %s: %w", orderID, err)
	}
	return ds[0].Reservations, ds[0].Short, nil
}

// Release marks the held reservations of order orderID released in tx, with the time
// of the release, and gives their tracked quantities back to their products' stock
// rows; the rows stay, so a reader sees that the cancel took effect. It runs after
// ApplyStatus won for the order, as a statement of its own, so under READ COMMITTED it
// sees the reservations of a placed event that committed while tx waited for the
// order's row.
func Release(ctx context.Context, tx pgx.Tx, orderID uuid.UUID) error {
	if err := release(ctx, tx, []pgtype.UUID{pgUUID(orderID)}); err != nil {
		return fmt.Errorf("release order %s: %w", orderID, err)
	}
	return nil
}

// Placed is one placed event: its status change and the order's lines.
type Placed struct {
	Change stock.StatusChange // Status is stock.StatusPlaced
	Lines  []stock.Line
}

// Decision is what ApplyPlaced did with one placed event.
type Decision struct {
	// Won reports whether the event's version won (docs/architecture.md, rule 4); a
	// stale event is decided by nobody and holds nothing.
	Won bool
	// Reservations hold every line of the order when it won and fitted: the order is
	// confirmed. Empty otherwise.
	Reservations []stock.Reservation
	// Short lists the lines that did not fit when it won and was rejected; nothing is held.
	Short []stock.Short
}

// Confirmed reports whether stock holds every line of the order.
func (d Decision) Confirmed() bool { return d.Won && len(d.Short) == 0 }

// upsertStatuses is upsertStatus for many orders of one round (no order twice), all
// moving to status $3, in order id order so that concurrent transactions lock the
// rows in one order.
const upsertStatuses = `
INSERT INTO order_status AS s (order_id, status, version, updated_at)
SELECT c.order_id, $3, c.version, now()
FROM unnest($1::uuid[], $2::int[]) AS c(order_id, version)
ORDER BY c.order_id
ON CONFLICT (order_id) DO UPDATE
SET status = EXCLUDED.status, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
WHERE s.version < EXCLUDED.version
RETURNING s.order_id`

// ApplyPlaced records the placed changes ps in tx, each as ApplyStatus would (rule 4
// of docs/architecture.md: only a newer version wins), and decides each change that
// won all or nothing (rule 6): in one round of distinct orders it locks the stock rows
// of every tracked product the round names, in product id order (SELECT ... FOR
// UPDATE), decides the orders one after the other in the order of ps against what is
// still available (stock.Decide), then inserts the reservations of the orders that fit
// and adds their tracked quantities to the stock rows. A concurrent transaction that
// wants one of those products waits for tx and then reads what tx left, so no product
// is ever reserved beyond its on-hand quantity; the row check reserved <= on_hand
// refuses it besides. Every transaction takes its order rows before its product rows,
// each in id order; the rare deadlock that a group mixing several rounds can still meet
// is detected by PostgreSQL and retried by the inbox (rule 3) like any contention.
// ds[n] is the decision on ps[n].
//
// It returns an error wrapping stock.ErrInvalidChange when a change can never be
// applied, or stock.ErrInvalidQuantity for a line quantity that does not parse
// (nothing written), and the database error otherwise, for the whole of ps. The
// caller owns tx.
func ApplyPlaced(ctx context.Context, tx pgx.Tx, ps []Placed) (ds []Decision, err error) {
	for _, p := range ps {
		if err := p.Change.Validate(); err != nil {
			return nil, err
		}
		for n, l := range p.Lines {
			if _, err := stock.ParseQuantity(l.Quantity); err != nil {
				return nil, fmt.Errorf("order %s line %d: %w", p.Change.OrderID, n+1, err)
			}
		}
	}
	ds = make([]Decision, len(ps))
	won := make([]bool, len(ps))
	for _, round := range inbox.Rounds(len(ps), func(n int) uuid.UUID { return ps[n].Change.OrderID }) {
		orders, versions := make([]pgtype.UUID, len(round)), make([]int32, len(round))
		for k, n := range round {
			orders[k], versions[k] = pgUUID(ps[n].Change.OrderID), int32(ps[n].Change.Version)
		}
		if err := collectWinners(ctx, tx, round, won, func(n int) uuid.UUID { return ps[n].Change.OrderID },
			upsertStatuses, orders, versions, "placed"); err != nil {
			return nil, fmt.Errorf("place %d orders: %w", len(round), err)
		}
		var ids []uuid.UUID
		var lines [][]stock.Line
		var at []int
		for _, n := range round {
			if won[n] {
				ids, lines, at = append(ids, ps[n].Change.OrderID), append(lines, ps[n].Lines), append(at, n)
			}
		}
		if len(ids) == 0 {
			continue
		}
		decided, err := decide(ctx, tx, ids, lines)
		if err != nil {
			return nil, fmt.Errorf("place %d orders: %w", len(round), err)
		}
		for k, n := range at {
			ds[n] = decided[k]
		}
	}
	return ds, nil
}

// lockLevels reads the stock rows of products, locking them in product id order.
const lockLevels = `SELECT product_id, on_hand::text, reserved::text FROM product_stock
WHERE product_id = ANY($1::uuid[]) ORDER BY product_id FOR UPDATE`

// reserveLines inserts reservations and adds the tracked ones to their stock rows, in one
// statement; the rows are locked already.
const reserveLines = `
WITH inserted AS (
	INSERT INTO reservation (id, order_id, line_no, product_id, quantity, tracked)
	SELECT r.id, r.order_id, r.line_no, r.product_id, r.quantity::numeric, r.tracked
	FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::uuid[], $5::text[], $6::bool[])
		AS r(id, order_id, line_no, product_id, quantity, tracked)
	RETURNING product_id, quantity, tracked
)
UPDATE product_stock p SET reserved = p.reserved + t.quantity, updated_at = now()
FROM (SELECT product_id, sum(quantity) AS quantity FROM inserted WHERE tracked GROUP BY product_id) t
WHERE p.product_id = t.product_id`

// decide locks the stock rows of the products of lines (lines[k] are the lines of order
// orders[k], whose status change won in tx), decides each order in turn, and holds the
// lines of those that fit.
func decide(ctx context.Context, tx pgx.Tx, orders []uuid.UUID, lines [][]stock.Line) ([]Decision, error) {
	var products []pgtype.UUID
	for _, ls := range lines {
		for _, l := range ls {
			products = append(products, pgUUID(l.ProductID))
		}
	}
	rows, err := tx.Query(ctx, lockLevels, products)
	if err != nil {
		return nil, fmt.Errorf("lock stock rows: %w", err)
	}
	levels := make(map[uuid.UUID]*stock.Level)
	var (
		product          pgtype.UUID
		onHand, reserved string
	)
	if _, err := pgx.ForEachRow(rows, []any{&product, &onHand, &reserved}, func() error {
		lv, err := level(product.Bytes, onHand, reserved)
		levels[lv.ProductID] = &lv
		return err
	}); err != nil {
		return nil, fmt.Errorf("lock stock rows: %w", err)
	}

	ds := make([]Decision, len(orders))
	var (
		ids, rOrders, rProducts []pgtype.UUID
		lineNos                 []int32
		qty                     []string
		tracked                 []bool
	)
	for k, orderID := range orders {
		short, err := stock.Decide(lines[k], levels)
		if err != nil {
			return nil, fmt.Errorf("order %s: %w", orderID, err)
		}
		ds[k] = Decision{Won: true, Short: short}
		if short != nil {
			continue
		}
		rs, err := stock.Reserve(orderID, lines[k], levels)
		if err != nil {
			return nil, fmt.Errorf("order %s: %w", orderID, err)
		}
		ds[k].Reservations = rs
		for _, r := range rs {
			ids, rOrders, rProducts = append(ids, pgUUID(r.ID)), append(rOrders, pgUUID(r.OrderID)), append(rProducts, pgUUID(r.ProductID))
			lineNos, qty, tracked = append(lineNos, int32(r.LineNo)), append(qty, r.Quantity), append(tracked, r.Tracked)
		}
	}
	if len(ids) > 0 {
		if _, err := tx.Exec(ctx, reserveLines, ids, rOrders, lineNos, rProducts, qty, tracked); err != nil {
			return nil, fmt.Errorf("reserve: %w", err)
		}
	}
	return ds, nil
}

// level builds a stock.Level from a stock row's columns.
func level(product uuid.UUID, onHand, reserved string) (stock.Level, error) {
	lv := stock.Level{ProductID: product}
	var err error
	if lv.OnHand, err = stock.ParseQuantity(onHand); err != nil {
		return lv, fmt.Errorf("product %s on_hand: %w", product, err)
	}
	if lv.Reserved, err = stock.ParseQuantity(reserved); err != nil {
		return lv, fmt.Errorf("product %s reserved: %w", product, err)
	}
	return lv, nil
}

// lockReleased locks the stock rows the held tracked reservations of some orders count in,
// in product id order, before release changes them.
const lockReleased = `SELECT product_id FROM product_stock
WHERE product_id IN (SELECT product_id FROM reservation WHERE order_id = ANY($1::uuid[]) AND status = 'held' AND tracked)
ORDER BY product_id FOR UPDATE`

// releaseOrders marks the held reservations of some orders released and takes their
// tracked quantities off their stock rows, in one statement.
const releaseOrders = `
WITH released AS (
	UPDATE reservation SET status = 'released', released_at = now()
	WHERE order_id = ANY($1::uuid[]) AND status = 'held'
	RETURNING product_id, quantity, tracked
)
UPDATE product_stock p SET reserved = p.reserved - t.quantity, updated_at = now()
FROM (SELECT product_id, sum(quantity) AS quantity FROM released WHERE tracked GROUP BY product_id) t
WHERE p.product_id = t.product_id`

// release releases the held reservations of orders (lockReleased, releaseOrders).
func release(ctx context.Context, tx pgx.Tx, orders []pgtype.UUID) error {
	if _, err := tx.Exec(ctx, lockReleased, orders); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, releaseOrders, orders)
	return err
}

// ApplyCancelled records the cancelled changes cs in tx, each as ApplyStatus would,
// and releases the held reservations of every order whose change won, as Release
// does (the stock rows they count in are locked in product id order first): the release is a statement of its own after the upsert, so it sees the
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
	for _, round := range inbox.Rounds(len(cs), func(n int) uuid.UUID { return cs[n].OrderID }) {
		orders, versions := make([]pgtype.UUID, len(round)), make([]int32, len(round))
		for k, n := range round {
			orders[k], versions[k] = pgUUID(cs[n].OrderID), int32(cs[n].Version)
		}
		if err := collectWinners(ctx, tx, round, won, func(n int) uuid.UUID { return cs[n].OrderID },
			upsertStatuses, orders, versions, "cancelled"); err != nil {
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
		if err := release(ctx, tx, released); err != nil {
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

// pgUUID is id as pgx encodes it without a detour through its text form.
func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// Reservations returns the reservations of order orderID in line order, held and
// released, or an empty slice when stock never held anything for it.
func (s *Store) Reservations(ctx context.Context, orderID uuid.UUID) ([]stock.Reservation, error) {
	rows, err := s.db.Query(ctx, `SELECT id, order_id, line_no, product_id, quantity::text, status, tracked
FROM reservation WHERE order_id = $1 ORDER BY line_no`, orderID)
	if err != nil {
		return nil, fmt.Errorf("list reservations of order %s: %w", orderID, err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (stock.Reservation, error) {
		var r stock.Reservation
		err := row.Scan(&r.ID, &r.OrderID, &r.LineNo, &r.ProductID, &r.Quantity, &r.Status, &r.Tracked)
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

// ErrNotTracked means a product has no stock row: it is untracked, always reservable.
var ErrNotTracked = errors.New("product is not tracked")

// ErrBelowReserved means an on-hand quantity below what reservations already hold.
var ErrBelowReserved = errors.New("on hand below the reserved quantity")

// Level returns the stock row of product, or an error wrapping ErrNotTracked.
func (s *Store) Level(ctx context.Context, product uuid.UUID) (stock.Level, error) {
	var onHand, reserved string
	err := s.db.QueryRow(ctx, `SELECT on_hand::text, reserved::text FROM product_stock WHERE product_id = $1`,
		pgUUID(product)).Scan(&onHand, &reserved)
	if errors.Is(err, pgx.ErrNoRows) {
		return stock.Level{}, fmt.Errorf("stock of product %s: %w", product, ErrNotTracked)
	}
	if err != nil {
		return stock.Level{}, fmt.Errorf("stock of product %s: %w", product, err)
	}
	return level(product, onHand, reserved)
}

// SetOnHand sets product's on-hand quantity, creating its stock row (reserved 0) when it
// has none, which makes it tracked; it returns the row as written. The statement takes
// the row's lock, so it waits for a reservation in flight and then checks against what
// that left. It returns an error wrapping ErrBelowReserved, changing nothing, when onHand
// is below what reservations hold.
func (s *Store) SetOnHand(ctx context.Context, product uuid.UUID, onHand stock.Quantity) (stock.Level, error) {
	var gotOnHand, reserved string
	err := s.db.QueryRow(ctx, `INSERT INTO product_stock AS p (product_id, on_hand) VALUES ($1, $2::numeric)
ON CONFLICT (product_id) DO UPDATE SET on_hand = EXCLUDED.on_hand, updated_at = now()
RETURNING p.on_hand::text, p.reserved::text`, pgUUID(product), onHand.String()).Scan(&gotOnHand, &reserved)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.ConstraintName == "product_stock_not_oversold" {
		return stock.Level{}, fmt.Errorf("set stock of product %s to %s: %w", product, onHand, ErrBelowReserved)
	}
	if err != nil {
		return stock.Level{}, fmt.Errorf("set stock of product %s to %s: %w", product, onHand, err)
	}
	return level(product, gotOnHand, reserved)
}
