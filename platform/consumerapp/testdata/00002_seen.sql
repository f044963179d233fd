-- +goose Up
-- The effect of the sample service of the tests: one row per event handled.
CREATE TABLE seen (
    event_id   uuid PRIMARY KEY,
    order_id   uuid NOT NULL,
    event_name text NOT NULL
);

-- +goose Down
DROP TABLE seen;
