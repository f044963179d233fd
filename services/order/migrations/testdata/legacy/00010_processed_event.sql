-- The inbox of the order API (docs/inbox.md): one row per Idempotency-Key of a
-- POST route, under consumer 'order-api', with the SHA-256 of the canonical
-- request and the first answer (result: status, location, body), written in the
-- transaction of the change it answers. `order purge-outbox` deletes old keys.

-- +goose Up
CREATE TABLE processed_event (
    consumer       text        NOT NULL,
    message_key    text        NOT NULL CHECK (octet_length(message_key) BETWEEN 1 AND 255),
    payload_sha256 bytea       CHECK (octet_length(payload_sha256) = 32),
    result         jsonb,
    processed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_key)
);

-- Purges delete by age.
CREATE INDEX processed_event_processed_at_idx ON processed_event (processed_at);

-- +goose Down
DROP TABLE processed_event;
