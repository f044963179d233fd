-- `order dlq replay` asks order's own orders whether an answer of stock is stale
-- before it replays it (docs/operations.md, "Dead letters"): order_maintenance, the
-- role of the dlq commands, reads an order's status and version.

-- +goose Up
GRANT SELECT (id, status, version) ON orders TO order_maintenance;

-- +goose Down
REVOKE SELECT (id, status, version) ON orders FROM order_maintenance;
