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
