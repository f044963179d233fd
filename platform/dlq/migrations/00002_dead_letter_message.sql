-- The message itself, kept with its dead_letter row, so that `dlq replay` and
-- `dlq drop` work from the record whether or not the dead-letter queue still holds
-- its copy (docs/operations.md, "Dead letters"): the body and the AMQP properties
-- and headers the consumer reads, as it received them. The consumer commits the row
-- before it publishes the copy, so no copy is ever without its row. Rows written
-- before this migration have NULL here: the dlq commands then need the queue copy.

-- +goose Up
ALTER TABLE dead_letter
    ADD COLUMN IF NOT EXISTS body        bytea NULL,
    -- message_id, type, content_type, correlation_id, timestamp (RFC 3339): the
    -- properties that are set.
    ADD COLUMN IF NOT EXISTS properties  jsonb NULL,
    -- The AMQP headers; strings, numbers and booleans as JSON, other values as text.
    ADD COLUMN IF NOT EXISTS headers     jsonb NULL,
    ADD COLUMN IF NOT EXISTS routing_key text  NULL;

-- +goose Down
ALTER TABLE dead_letter
    DROP COLUMN body,
    DROP COLUMN properties,
    DROP COLUMN headers,
    DROP COLUMN routing_key;
