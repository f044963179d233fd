package auditor_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/store"
	"example.com/shop/services/auditor/internal/store/storetest"
)

// world is one order database and the two consumers' databases, migrated.
type world struct {
	order, stock, shipping *pgxpool.Pool
	st                     *store.Store
}

func newWorld(t *testing.T) *world {
	t.Helper()
	o, st, sh := storetest.New(t)
	w := &world{order: o.Pool, stock: st.Pool, shipping: sh.Pool}
	w.st = storetest.Store(o, st, sh)
	return w
}

// db returns the database of the service name.
func (w *world) db(name string) *pgxpool.Pool {
	switch name {
	case contracts.ConsumerStock:
		return w.stock
	case contracts.ConsumerShipping:
		return w.shipping
	}
	return w.order
}

// idAt returns a UUID v7 of the millisecond of at.
func idAt(t *testing.T, at time.Time) uuid.UUID {
	t.Helper()
	var u uuid.UUID
	if _, err := rand.Read(u[:]); err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(at.UnixMilli())<<16)
	copy(u[:6], b[:6])
	u[6] = u[6]&0x0f | 0x70
	u[8] = u[8]&0x3f | 0x80
	return u
}

// newOrder inserts a draft order created at createdAt and returns its id.
func (w *world) newOrder(t *testing.T, createdAt time.Time) uuid.UUID {
	t.Helper()
	id := idAt(t, createdAt)
	w.exec(t, w.order, `INSERT INTO orders (id, customer_id, status, version, created_at, updated_at)
VALUES ($1, $2, 'draft', 1, $3, $3)`, id, uuid.New(), createdAt)
	return id
}

// event writes the outbox row of an event of order at occurredAt, moves the order to
// the event's status and version, and marks the row published at publishedAt (nil:
// unpublished).
func (w *world) event(t *testing.T, orderID uuid.UUID, name string, version int, occurredAt time.Time, publishedAt *time.Time) uuid.UUID {
	t.Helper()
	id := idAt(t, occurredAt)
	status := map[string]string{contracts.EventOrderPlaced: "placed", contracts.EventOrderCancelled: "cancelled",
		contracts.EventOrderConfirmed: "confirmed", contracts.EventOrderRejected: "rejected"}[name]
	env := fmt.Sprintf(`{"event_id":%q,"event_name":%q,"payload":{"order_id":%q,"version":%d}}`, id, name, orderID, version)
	w.exec(t, w.order, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
VALUES ($1, $2, $2, $3, $4, $5)`, id, name, env, occurredAt, publishedAt)
	w.exec(t, w.order, `UPDATE orders SET status = $2, version = $3, updated_at = $4,
	rejection = CASE WHEN $2 = 'rejected' THEN '{"reason":"insufficient_stock","lines":[]}'::jsonb END WHERE id = $1`,
		orderID, status, version, occurredAt)
	return id
}

// answer writes stock's outbox row of its answer name to version of order at
// occurredAt, published at publishedAt (nil: unpublished).
func (w *world) answer(t *testing.T, orderID uuid.UUID, name string, version int, occurredAt time.Time, publishedAt *time.Time) uuid.UUID {
	t.Helper()
	id := idAt(t, occurredAt)
	env := fmt.Sprintf(`{"event_id":%q,"event_name":%q,"payload":{"order_id":%q,"order_version":%d}}`, id, name, orderID, version)
	w.exec(t, w.stock, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
VALUES ($1, $2, $2, $3, $4, $5)`, id, name, env, occurredAt, publishedAt)
	return id
}

// process records consumer's processed_event key of event at `at`.
func (w *world) process(t *testing.T, consumer string, event uuid.UUID, at time.Time) {
	t.Helper()
	w.exec(t, w.db(consumer), `INSERT INTO processed_event (consumer, message_key, processed_at) VALUES ($1, $2, $3)`, consumer, event.String(), at)
}

// forget deletes consumer's key of event, as an operator's mistake would.
func (w *world) forget(t *testing.T, consumer string, event uuid.UUID) {
	t.Helper()
	w.exec(t, w.db(consumer), `DELETE FROM processed_event WHERE consumer = $1 AND message_key = $2`, consumer, event.String())
}

func (w *world) exec(t *testing.T, p *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := p.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func ptr[T any](v T) *T { return &v }
