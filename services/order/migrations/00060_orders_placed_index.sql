-- The auditor's unanswered orders (docs/operations.md, "UnansweredOrders"): every
-- audit cycle reads the orders still placed, waiting for stock's answer, oldest last
-- change first. A partial index keeps that read as small as the number of placed
-- orders, whatever the number of orders. Built concurrently: orders keep being
-- written while it builds.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_placed_idx ON orders (updated_at, id) WHERE status = 'placed';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS orders_placed_idx;
