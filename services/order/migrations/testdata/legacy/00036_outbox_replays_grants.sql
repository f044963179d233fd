-- +goose Up
-- order replay-outbox runs as order_maintenance: it clears published_at
-- (granted in 00020) and counts the replay.
GRANT UPDATE (replays) ON outbox TO order_maintenance;

-- +goose Down
REVOKE UPDATE (replays) ON outbox FROM order_maintenance;
