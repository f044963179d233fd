-- +goose Up
-- The outbox table as the order service creates it (services/order/migrations),
-- for the Writer's tests; platform/ cannot import services/.
CREATE TABLE outbox (
    id           uuid        PRIMARY KEY,
    event_name   text        NOT NULL,
    routing_key  text        NOT NULL,
    envelope     jsonb       NOT NULL,
    occurred_at  timestamptz NOT NULL,
    published_at timestamptz NULL,
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text        NULL
);

CREATE INDEX outbox_unpublished_idx ON outbox (occurred_at, id) WHERE published_at IS NULL;

-- +goose Down
DROP TABLE outbox;
