-- +goose Up
-- The transactional outbox (docs/architecture.md, rules 1 and 2): one row per event,
-- written in the transaction of the business change, published by the relay.
CREATE TABLE outbox (
    id           uuid        PRIMARY KEY, -- the envelope's event_id (UUID v7)
    event_name   text        NOT NULL,
    routing_key  text        NOT NULL,
    envelope     jsonb       NOT NULL,
    occurred_at  timestamptz NOT NULL,
    published_at timestamptz NULL,
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text        NULL
);

-- The relay reads unpublished rows in (occurred_at, id) order.
CREATE INDEX outbox_unpublished_idx ON outbox (occurred_at, id) WHERE published_at IS NULL;

-- Wake a listening relay once per inserting statement (outbox.NotifyChannel).
-- +goose StatementBegin
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_inserted', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_inserted
    AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- +goose Down
DROP TRIGGER outbox_inserted ON outbox;
DROP FUNCTION outbox_notify();
DROP TABLE outbox;
