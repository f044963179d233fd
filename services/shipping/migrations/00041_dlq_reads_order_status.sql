-- `shipping dlq replay` asks the service's own order_status whether an event is stale
-- before it replays it (docs/operations.md, "Dead letters"): shipping_maintenance, the
-- role of the dlq commands, reads it.

-- +goose Up
GRANT SELECT ON order_status TO shipping_maintenance;

-- +goose Down
REVOKE SELECT ON order_status FROM shipping_maintenance;
