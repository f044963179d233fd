package migrations_test

import (
	"os"
	"testing"

	"example.com/shop/services/order/migrations"
	"example.com/shop/testkit/migratetest"
)

// TestUpgrade migrates a database as the release before the platform shipped its
// tables left it (testdata/legacy: order's migrations of that release, unchanged)
// and proves that Schema takes it to the schema of a fresh database, rows kept.
func TestUpgrade(t *testing.T) {
	t.Parallel()
	migratetest.Upgrade(t, os.DirFS("testdata/legacy"), migrations.Schema, `
INSERT INTO orders (id, customer_id, status, version, created_at, updated_at) VALUES
       ('0190b6a4-8e2c-7000-8000-0000000000a1', gen_random_uuid(), 'placed', 2, now(), now()),
       ('0190b6a4-8e2c-7000-8000-0000000000a2', gen_random_uuid(), 'draft', 1, now(), now());
INSERT INTO order_line (order_id, product_id, quantity, line_no) VALUES
       ('0190b6a4-8e2c-7000-8000-0000000000a1', gen_random_uuid(), 2.5, 0);
INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at, aggregate_key, key_hash, replays, trace_context)
VALUES ('0190b6a4-8e2c-7000-8000-000000000001', 'order.order.placed.v1', 'order.order.placed.v1', '{"event_id": "1"}',
        now() - interval '1 hour', now(), '0190b6a4-8e2c-7000-8000-0000000000a1',
        outbox_key_hash('0190b6a4-8e2c-7000-8000-0000000000a1'), 1, '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'),
       ('0190b6a4-8e2c-7000-8000-000000000002', 'order.order.cancelled.v1', 'order.order.cancelled.v1', '{"event_id": "2"}',
        now(), NULL, '0190b6a4-8e2c-7000-8000-0000000000a1', outbox_key_hash('0190b6a4-8e2c-7000-8000-0000000000a1'), 0, NULL);
INSERT INTO processed_event (consumer, message_key, payload_sha256, result) VALUES
       ('order-api', 'create 1', sha256('x'), '{"status": 201, "location": "/orders/0190b6a4-8e2c-7000-8000-0000000000a1"}');`)
}
