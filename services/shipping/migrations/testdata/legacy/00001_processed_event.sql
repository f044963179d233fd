-- +goose Up
-- Inbox keys (docs/architecture.md, rule 3): one row per event a consumer has handled,
-- written in the same transaction as the handler's effect.
CREATE TABLE processed_event (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Purges delete by age.
CREATE INDEX processed_event_processed_at_idx ON processed_event (processed_at);

-- +goose Down
DROP TABLE processed_event;
