-- Keys of the events the stock consumer has processed (docs/architecture.md, rule 3). A key is
-- written in the same transaction as the event's reservations, so both commit or
-- neither does. bin/stock purge-inbox deletes old keys by processed_at.

-- +goose Up
CREATE TABLE processed_event (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

CREATE INDEX processed_event_processed_at_idx ON processed_event (processed_at);

-- +goose Down
DROP TABLE processed_event;
