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

// Create is Store.Create in t's transaction: the order, its lines and the
// outbox rows of the events it recorded (a new draft records none).
func (t Tx) Create(ctx context.Context, o *order.Order) error {
	entries, err := t.outboxEntries(ctx, o)
	if err != nil {
		return fmt.Errorf("create order %s: %w", o.ID(), err)
	}
	if _, err := t.tx.Exec(ctx, `INSERT INTO orders (id, customer_id, status, version, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6)`,
		pgUUID(o.ID()), pgUUID(o.CustomerID()), string(o.Status()), o.Version(), o.CreatedAt(), o.UpdatedAt()); err != nil {
		return fmt.Errorf("create order %s: insert order: %w", o.ID(), err)
	}
	lines := o.Lines()
	products, quantities := make([][16]byte, len(lines)), make([]string, len(lines))
	for i, l := range lines {
		products[i], quantities[i] = l.ProductID, l.Quantity.String()
	}
	if _, err := t.tx.Exec(ctx, `INSERT INTO order_line (order_id, product_id, quantity, line_no)
		SELECT $1, l.product_id, l.quantity::numeric, l.n - 1
		FROM unnest($2::uuid[], $3::text[]) WITH ORDINALITY AS l(product_id, quantity, n)`,
		pgUUID(o.ID()), products, quantities); err != nil {
		return fmt.Errorf("create order %s: insert order lines: %w", o.ID(), err)
	}
	if err := t.s.outbox.Insert(ctx, t.tx, entries...); err != nil {
		return fmt.Errorf("create order %s: %w", o.ID(), err)
	}
	return nil
}

// Get returns the order with id, or an error wrapping order.ErrNotFound.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (*order.Order, error) {
	o, err := scanOrder(id, s.pool.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders o WHERE o.id = $1`, pgUUID(id)))
	if err != nil {
		return nil, fmt.Errorf("get order %s: %w", id, err)
	}
	return o, nil
}

// Update runs one transition of order id in a transaction of its own, which
// commits when Tx.Update succeeds and rolls back otherwise.
func (s *Store) Update(ctx context.Context, id uuid.UUID, fn func(*order.Order) error) error {
	return s.InTx(ctx, func(ctx context.Context, tx Tx) error { return tx.Update(ctx, id, fn) })
}

// UpdateInTx is Tx.Update inside tx, a transaction the caller owns: the inbox's, for
// a consumer whose change must commit with the message's processed_event key
// (docs/architecture.md, rule 3). It never commits or rolls back tx.
func (s *Store) UpdateInTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, fn func(*order.Order) error) error {
	return Tx{s: s, tx: tx}.Update(ctx, id, fn)
}

// UpdateInTx returns Store.UpdateInTx for a consumer registered before any pool
// exists (the inbox's handlers, events.Register): it works only in the caller's
// transaction and writes the events through w.
func UpdateInTx(w *outbox.Writer) func(ctx context.Context, tx pgx.Tx, id uuid.UUID, fn func(*order.Order) error) error {
	return (&Store{outbox: w}).UpdateInTx
}

// Update is docs/architecture.md, rule 1, top to bottom: it locks order id,
// fires fn's transition on it (place, cancel, or stock's answer: confirm,
// reject), builds and checks the envelope of each event the transition
// recorded, saves the new status and version and inserts the outbox rows, all
// in t's transaction, which the caller commits (Store.InTx for the API, the
// inbox for stock's answers and for a request with an Idempotency-Key). The
// save and the outbox INSERT go to PostgreSQL in one batch (one round trip),
// and run in that order. A concurrent Update of the same order
// waits at the lock until this transaction ends, then sees its result.
//
// It returns an error wrapping order.ErrNotFound when no order has id, fn's
// error when fn refuses, and the Writer's error (a *contracts.ValidationError
// for an envelope that breaks the contract) when an event cannot be written;
// the caller then rolls back and nothing changes. When fn changes nothing (the
// version stays), nothing is written. The order fn received reflects what was
// committed once the caller commits, so fn may keep it to show the result.
func (t Tx) Update(ctx context.Context, id uuid.UUID, fn func(*order.Order) error) error {
	// Lock: the order row, read with its lines.
	o, err := scanOrder(id, t.tx.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders o WHERE o.id = $1 FOR UPDATE OF o`, pgUUID(id)))
	if err != nil {
		return fmt.Errorf("update order %s: %w", id, err)
	}
	// Transition: the domain's state machine decides, and records the event.
	before := o.Version()
	if err := fn(o); err != nil {
		return fmt.Errorf("update order %s: %w", id, err)
	}
	if o.Version() == before {
		return nil
	}
	// Events: each one the transition recorded, as its contract's envelope,
	// checked against its schema; nothing is written yet.
	entries, err := t.outboxEntries(ctx, o)
	if err != nil {
		return fmt.Errorf("update order %s: %w", id, err)
	}
	// Save and outbox, sent in one round trip (a batch) and run in this order: the
	// UPDATE (the row is locked, so its version is still the one read), then one
	// INSERT for the outbox rows (outbox.Writer.Queue, the statement of Insert).
	batch := &pgx.Batch{}
	batch.Queue(`UPDATE orders SET status = $2, version = $3, updated_at = $4, rejection = $6 WHERE id = $1 AND version = $5`,
		pgUUID(id), string(o.Status()), o.Version(), o.UpdatedAt(), before, rejectionJSON(o.Rejection()))
	queued, err := t.s.outbox.Queue(batch, entries...)
	if err != nil {
		return fmt.Errorf("update order %s: %w", id, err)
	}
	results := t.tx.SendBatch(ctx, batch)
	tag, err := results.Exec()
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("version %d changed under the row lock", before) // refuse rather than lose an update
	}
	if err != nil {
		_ = results.Close()
		return fmt.Errorf("update order %s: save: %w", id, err)
	}
	if queued {
		if _, err := results.Exec(); err != nil {
			_ = results.Close()
			return fmt.Errorf("update order %s: %w", id, outbox.InsertError(entries, err))
		}
	}
	if err := results.Close(); err != nil {
		return fmt.Errorf("update order %s: %w", id, err)
	}
	return nil // the caller commits: the order's change and its events, or neither
}

// outboxEntries builds the outbox rows of the events o recorded
// (outbox.Writer.Prepare: the envelope, checked against its schema), with the
// order id as aggregate key (so the relay keeps one order's events in order)
// and as correlation id.
func (t Tx) outboxEntries(ctx context.Context, o *order.Order) ([]outbox.Entry, error) {
	entries := make([]outbox.Entry, 0, len(o.Events()))
	for _, e := range o.Events() {
		name, payload, err := events.Outbox(e)
		if err != nil {
			return nil, err
		}
		entry, err := t.s.outbox.Prepare(ctx, name, o.ID().String(), o.ID().String(), payload)
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry)
	}
	return entries, nil
}

// orderColumns reads an order and its lines in one statement, for scanOrder.
const orderColumns = `o.customer_id, o.status, o.version, o.created_at, o.updated_at, o.rejection,
	ARRAY(SELECT l.product_id FROM order_line l WHERE l.order_id = o.id ORDER BY l.line_no),
	ARRAY(SELECT l.quantity::text FROM order_line l WHERE l.order_id = o.id ORDER BY l.line_no)`

// scanOrder decodes order id from row, a query of orderColumns; no row is
// order.ErrNotFound.
func scanOrder(id uuid.UUID, row pgx.Row) (*order.Order, error) {
	var (
		customerID           uuid.UUID
		status               string
		version              int
		createdAt, updatedAt time.Time
		stored               *contracts.Rejection
		products             [][16]byte
		quantities           []string
	)
	err := row.Scan((*[16]byte)(&customerID), &status, &version, &createdAt, &updatedAt, &stored, &products, &quantities)
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
