-- +goose Up
-- Rows still waiting when relay partitions arrive get their order's key, so
-- that each order's waiting events share one partition with its new ones.
-- Rows published before keep no key: a replay of them goes through partition
-- 0, in (occurred_at, id) order among themselves.
UPDATE outbox
SET aggregate_key = envelope #>> '{payload,order_id}',
    key_hash = outbox_key_hash(envelope #>> '{payload,order_id}')
WHERE published_at IS NULL AND envelope #>> '{payload,order_id}' IS NOT NULL;

-- +goose Down
SELECT 1;
