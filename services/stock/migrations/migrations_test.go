package migrations_test

import (
	"os"
	"testing"

	"example.com/shop/services/stock/migrations"
	"example.com/shop/testkit/inboxtest"
	"example.com/shop/testkit/migratetest"
)

// TestInbox runs the inbox acceptance suite on stock's schema (docs/architecture.md,
// rule 3).
func TestInbox(t *testing.T) {
	inboxtest.Run(t, migrations.Schema)
}

// TestUpgrade migrates a database as the release before the platform shipped its
// tables left it (testdata/legacy: stock's migrations of that release, unchanged)
// and proves that Schema takes it to the schema of a fresh database, rows kept.
func TestUpgrade(t *testing.T) {
	t.Parallel()
	migratetest.Upgrade(t, os.DirFS("testdata/legacy"), migrations.Schema, `
INSERT INTO processed_event (consumer, message_key, payload_sha256, processed_at)
VALUES ('stock', '0190b6a4-8e2c-7000-8000-000000000001', NULL, '2026-11-01 10:00:00+00'),
       ('stock', '0190b6a4-8e2c-7000-8000-000000000002', sha256('x'), '2026-11-30 10:00:00+00');
INSERT INTO order_status (order_id, status, version) VALUES
       ('0190b6a4-8e2c-7000-8000-0000000000a1', 'placed', 1),
       ('0190b6a4-8e2c-7000-8000-0000000000a2', 'cancelled', 2);
INSERT INTO reservation (id, order_id, line_no, product_id, quantity, status, released_at) VALUES
       ('0190b6a4-8e2c-7000-8000-0000000000b1', '0190b6a4-8e2c-7000-8000-0000000000a1', 1, gen_random_uuid(), 2, 'held', NULL),
       ('0190b6a4-8e2c-7000-8000-0000000000b2', '0190b6a4-8e2c-7000-8000-0000000000a2', 1, gen_random_uuid(), 1, 'released', now());
INSERT INTO dead_letter (consumer, message_key, event_id, event_name, reason, attempts) VALUES
       ('stock', 'sha256:00', NULL, NULL, 'not JSON', 1);
INSERT INTO dead_letter (consumer, message_key, event_id, event_name, reason, attempts, resolved_at, resolution) VALUES
       ('stock', '0190b6a4-8e2c-7000-8000-000000000003', '0190b6a4-8e2c-7000-8000-000000000003', 'order.order.placed.v1', 'boom', 5, now(), 'dropped');`)
}
