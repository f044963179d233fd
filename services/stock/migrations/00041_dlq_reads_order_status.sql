-- `stock dlq replay` asks the service's own order_status whether an event is stale
-- before it replays it (docs/operations.md, "Dead letters"): stock_maintenance, the
-- role of the dlq commands, reads it.

-- +goose Up
GRANT SELECT ON order_status TO stock_maintenance;

-- +goose Down
REVOKE SELECT ON order_status FROM stock_maintenance;
