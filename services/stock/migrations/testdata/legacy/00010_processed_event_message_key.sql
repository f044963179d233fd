-- processed_event becomes the general inbox table (docs/inbox.md): any message key
-- as text instead of the event_id uuid, the SHA-256 of the content processed
-- first, and the stored result of mode ReturnStored.
--
-- An event processed before this migration stays a duplicate after it: its uuid
-- becomes its canonical lower-case text, the very key the consumer writes now
-- (msgkey.EventID). Its payload_sha256 is NULL, which the inbox reads as "content
-- unknown": a later copy of that event is a duplicate, never a conflict.
--
-- The type change rewrites the table and its primary key under an ACCESS EXCLUSIVE
-- lock: stop the consumer (or accept the pause) while it runs on a large table.

-- +goose Up
ALTER TABLE processed_event RENAME COLUMN event_id TO message_key;
ALTER TABLE processed_event
    ALTER COLUMN message_key TYPE text USING message_key::text,
    ADD CONSTRAINT processed_event_message_key_length CHECK (octet_length(message_key) BETWEEN 1 AND 255),
    ADD COLUMN payload_sha256 bytea CHECK (octet_length(payload_sha256) = 32),
    ADD COLUMN result jsonb;

-- +goose Down
-- Fails when a key is not a uuid: such keys cannot be kept by the old schema.
ALTER TABLE processed_event
    DROP COLUMN result,
    DROP COLUMN payload_sha256,
    DROP CONSTRAINT processed_event_message_key_length,
    ALTER COLUMN message_key TYPE uuid USING message_key::uuid;
ALTER TABLE processed_event RENAME COLUMN message_key TO event_id;
