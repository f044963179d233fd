// Package store keeps orders in PostgreSQL and writes the events their
// transitions record to the outbox in the same transaction (docs/architecture.md, rule 1).
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
	"example.com/shop/services/order/internal/events"
	"example.com/shop/services/order/internal/order"
)

// Store is the order repository. Its methods each run in their own
// transaction; callers never see a pgx.Tx. A Store is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	outbox *outbox.Writer
}

// New returns a Store on pool that records events through w.
func New(pool *pgxpool.Pool, w *outbox.Writer) *Store {
	return &Store{pool: pool, outbox: w}
}

// Create inserts a new order and its lines, and writes the events it has
// recorded, if any, to the outbox, all in one transaction. It returns an error
// when the order's id already exists or the database fails.
func (s *Store) Create(ctx context.Context, o *order.Order) error {
	return s.InTx(ctx, func(ctx context.Context, tx Tx) error { return tx.Create(ctx, o) })
}

// Tx is the store inside one open transaction, for a caller that commits more
// than one change together (an idempotency key with the order it protects). Its
// methods are those of Store, without their own transaction.
type Tx struct {
	s  *Store
	tx pgx.Tx
}

// InTx runs fn in one READ COMMITTED transaction: it commits when fn returns nil
// and rolls everything back when fn fails, returning fn's error.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error {
	return pg.WithTx(ctx, s.pool, func(tx pgx.Tx) error { return fn(ctx, Tx{s: s, tx: tx}) })
}

// Idempotent runs fn once per key of consumer c (docs/inbox.md): in one
// transaction it records m in processed_event, runs fn and stores its result,
// then commits. A request that comes again with the same key gets the Outcome
// of c's mode without running fn (inbox.ReturnStored: the first result), one
// with the same key and another content an error wrapping inbox.ErrConflict. A
// failing fn rolls back the key with its writes.
func (s *Store) Idempotent(ctx context.Context, c *inbox.Consumer, m inbox.Message, fn func(ctx context.Context, tx Tx) (any, error)) (inbox.Outcome, error) {
	return c.Handle(ctx, s.pool, m, func(ctx context.Context, tx pgx.Tx) (any, error) {
		return fn(ctx, Tx{s: s, tx: tx})
	})
}

// Create is Store.Create in t's transaction.
func (t Tx) Create(ctx context.Context, o *order.Order) error {
	tx := &pipeTx{Tx: t.tx}
	insertOrder(tx, o)
	if err := t.s.writeEvents(ctx, tx, o); err != nil {
		return fmt.Errorf("create order %s: %w", o.ID(), err)
	}
	if err := tx.flush(ctx); err != nil {
		return fmt.Errorf("create order %s: %w", o.ID(), err)
	}
	return nil
}

// Get returns the order with id, or an error wrapping order.ErrNotFound.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (*order.Order, error) {
	var o *order.Order
	err := pg.WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		o, err = load(ctx, tx, id, false)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get order %s: %w", id, err)
	}
	return o, nil
}

// Update changes one order in one transaction: it locks the order row with
// SELECT ... FOR UPDATE (a concurrent Update of the same order waits until
// this one commits, then sees its result), reading the lines in the same
// statement, calls fn, and when fn returns nil and changed the version, saves
// status, version and updated_at and writes every event fn's transitions
// recorded to the outbox through the outbox.Writer, then commits
// (docs/architecture.md, rule 1). The save and the outbox rows go to
// PostgreSQL in one pipeline (pipeTx): BEGIN, read, save with outbox, COMMIT
// are four round trips.
//
// It returns an error wrapping order.ErrNotFound when no order has id, fn's
// error when fn fails, and the Writer's error (a *contracts.ValidationError
// for an envelope that breaks the contract) when an event cannot be written;
// in every error case the transaction is rolled back and nothing changes.
// The order fn received reflects what was committed once Update returns nil,
// so fn may keep it to show the result.
func (s *Store) Update(ctx context.Context, id uuid.UUID, fn func(*order.Order) error) error {
	return s.InTx(ctx, func(ctx context.Context, tx Tx) error { return tx.Update(ctx, id, fn) })
}

// UpdateInTx is Update inside tx, a transaction the caller owns: the inbox's, for
// a consumer whose change must commit with the message's processed_event key
// (docs/architecture.md, rule 3). It locks the order row, calls fn, saves and
// writes the outbox rows as Update does, and never commits or rolls back tx.
func (s *Store) UpdateInTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, fn func(*order.Order) error) error {
	return Tx{s: s, tx: tx}.Update(ctx, id, fn)
}

// UpdateInTx returns Store.UpdateInTx for a consumer registered before any pool
// exists (the inbox's handlers, events.Register): it works only in the caller's
// transaction and writes the events through w.
func UpdateInTx(w *outbox.Writer) func(ctx context.Context, tx pgx.Tx, id uuid.UUID, fn func(*order.Order) error) error {
	return (&Store{outbox: w}).UpdateInTx
}

// Update is Store.Update in t's transaction.
func (t Tx) Update(ctx context.Context, id uuid.UUID, fn func(*order.Order) error) error {
	if err := t.update(ctx, id, fn); err != nil {
		return fmt.Errorf("update order %s: %w", id, err)
	}
	return nil
}

func (t Tx) update(ctx context.Context, id uuid.UUID, fn func(*order.Order) error) error {
	o, err := load(ctx, t.tx, id, true)
	if err != nil {
		return err
	}
	before := o.Version()
	if err := fn(o); err != nil {
		return err
	}
	if o.Version() == before {
		return nil
	}
	// The UPDATE goes out in one round trip with the outbox row.
	tx := &pipeTx{Tx: t.tx}
	tx.hold("save", func(tag pgconn.CommandTag) error {
		if tag.RowsAffected() != 1 {
			// Cannot happen while the row is locked; refuse rather than lose an update.
			return fmt.Errorf("version %d changed under the row lock", before)
		}
		return nil
	}, `UPDATE orders SET status = $2, version = $3, updated_at = $4, rejection = $6 WHERE id = $1 AND version = $5`,
		pgUUID(o.ID()), string(o.Status()), o.Version(), o.UpdatedAt(), before, rejectionJSON(o.Rejection()))
	if err := t.s.writeEvents(ctx, tx, o); err != nil {
		return err
	}
	return tx.flush(ctx)
}

// writeEvents writes the events o recorded to the outbox, with the order id as
// aggregate key (so the relay keeps one order's events in order) and as
// correlation id.
func (s *Store) writeEvents(ctx context.Context, tx pgx.Tx, o *order.Order) error {
	for _, e := range o.Events() {
		name, payload, err := events.Outbox(e)
		if err != nil {
			return err
		}
		if _, err := s.outbox.Write(ctx, tx, name, o.ID().String(), o.ID().String(), payload); err != nil {
			return err
		}
	}
	return nil
}

// insertOrder inserts o and its lines in one round trip; the caller's next
// statement on tx, or its flush, sends them.
func insertOrder(tx *pipeTx, o *order.Order) {
	tx.hold("insert order", nil,
		`INSERT INTO orders (id, customer_id, status, version, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6)`,
		pgUUID(o.ID()), pgUUID(o.CustomerID()), string(o.Status()), o.Version(), o.CreatedAt(), o.UpdatedAt())
	lines := o.Lines()
	products := make([][16]byte, len(lines))
	quantities := make([]string, len(lines))
	for i, l := range lines {
		products[i], quantities[i] = l.ProductID, l.Quantity.String()
	}
	tx.hold("insert order lines", nil, `
		INSERT INTO order_line (order_id, product_id, quantity, line_no)
		SELECT $1, l.product_id, l.quantity::numeric, l.n - 1
		FROM unnest($2::uuid[], $3::text[]) WITH ORDINALITY AS l(product_id, quantity, n)`,
		pgUUID(o.ID()), products, quantities)
}

// load reads one order and its lines in tx in one statement, locking the
// order row until tx ends when forUpdate is set.
func load(ctx context.Context, tx pgx.Tx, id uuid.UUID, forUpdate bool) (*order.Order, error) {
	query := `SELECT o.customer_id, o.status, o.version, o.created_at, o.updated_at, o.rejection,
		ARRAY(SELECT l.product_id FROM order_line l WHERE l.order_id = o.id ORDER BY l.line_no),
		ARRAY(SELECT l.quantity::text FROM order_line l WHERE l.order_id = o.id ORDER BY l.line_no)
		FROM orders o WHERE o.id = $1`
	if forUpdate {
		query += ` FOR UPDATE OF o`
	}
	var (
		customerID           uuid.UUID
		status               string
		version              int
		createdAt, updatedAt time.Time
		stored               *contracts.Rejection
		products             [][16]byte
		quantities           []string
	)
	err := tx.QueryRow(ctx, query, pgUUID(id)).Scan((*[16]byte)(&customerID), &status, &version, &createdAt, &updatedAt, &stored, &products, &quantities)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, order.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read order: %w", err)
	}
	if len(products) != len(quantities) {
		return nil, fmt.Errorf("read order lines: %d products, %d quantities", len(products), len(quantities))
	}
	var lines []order.Line
	for i, productID := range products {
		q, err := order.ParseQuantity(quantities[i])
		if err != nil {
			return nil, fmt.Errorf("read order lines: stored quantity: %w", err)
		}
		lines = append(lines, order.Line{ProductID: uuid.UUID(productID), Quantity: q})
	}
	var rejection *order.Rejection
	if stored != nil {
		r, err := events.RejectionFromContract(*stored)
		if err != nil {
			return nil, fmt.Errorf("read order rejection: %w", err)
		}
		rejection = &r
	}
	return order.FromDatabase(id, customerID, order.Status(status), version, lines, createdAt, updatedAt, rejection)
}

// rejectionJSON is the orders.rejection column of r: the contract's form, NULL for nil.
func rejectionJSON(r *order.Rejection) *contracts.Rejection {
	if r == nil {
		return nil
	}
	c := events.RejectionContract(*r)
	return &c
}

// pgUUID is id as pgx encodes it directly in the binary format; a uuid.UUID
// itself goes through its driver.Valuer, a failed binary encoding and a text
// retry on every statement.
func pgUUID(id uuid.UUID) [16]byte { return id }

// pipeTx is a transaction that holds back statements whose results the store
// only checks, and sends them in one pipeline (one round trip to PostgreSQL)
// with the next statement run on it, or at flush: a place is then three round
// trips (BEGIN, the locking read, the UPDATE with the outbox row) and the
// COMMIT, instead of six. Every statement still runs in order in tx, and an
// error of a held statement fails the statement it went out with, naming the
// held one; the caller rolls tx back as for any error.
type pipeTx struct {
	pgx.Tx
	held *pgx.Batch
}

// hold queues sql to go out with the next statement; check, when not nil,
// judges its command tag. Errors are wrapped with what.
func (t *pipeTx) hold(what string, check func(pgconn.CommandTag) error, sql string, args ...any) {
	if t.held == nil {
		t.held = &pgx.Batch{}
	}
	t.held.Queue(sql, args...).Fn = func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		if err == nil && check != nil {
			err = check(tag)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
}

// flush sends the held statements, if any.
func (t *pipeTx) flush(ctx context.Context) error {
	if t.held == nil {
		return nil
	}
	b := t.held
	t.held = nil
	return t.Tx.SendBatch(ctx, b).Close()
}

// Exec runs sql after the held statements, in the same round trip.
func (t *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.held == nil {
		return t.Tx.Exec(ctx, sql, args...)
	}
	var tag pgconn.CommandTag
	t.held.Queue(sql, args...).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	if err := t.flush(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return tag, nil
}

// Query sends the held statements first.
func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Query(ctx, sql, args...)
}

// QueryRow sends the held statements first; their error is the row's.
func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.flush(ctx); err != nil {
		return errRow{err}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

// SendBatch sends the held statements first.
func (t *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.held != nil {
		held := t.held
		t.held = nil
		held.QueuedQueries = append(held.QueuedQueries, b.QueuedQueries...)
		b = held
	}
	return t.Tx.SendBatch(ctx, b)
}

// Commit sends the held statements, then commits.
func (t *pipeTx) Commit(ctx context.Context) error {
	if err := t.flush(ctx); err != nil {
		return err
	}
	return t.Tx.Commit(ctx)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
