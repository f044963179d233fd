-- The transactional outbox of stock's answers (docs/architecture.md, rules 1, 2 and 6):
-- stock.reservation.confirmed.v1 or stock.reservation.rejected.v1, written in the
-- transaction of the reservations and the placed event's processed_event key, published
-- by stock's relay. The same table as order's (its migrations 00002, 00030, 00035 and
-- 00040 in one), so platform/outbox writes and relays both.
--   stock_app          INSERT only: it can neither mark nor delete events
--   stock_relay        reads and marks rows published (published_at, attempts, last_error)
--   stock_maintenance  deletes published rows, clears published_at, counts replays

-- +goose Up
CREATE TABLE outbox (
    id            uuid        PRIMARY KEY, -- the envelope's event_id (UUID v7)
    event_name    text        NOT NULL,
    routing_key   text        NOT NULL,
    envelope      jsonb       NOT NULL,
    occurred_at   timestamptz NOT NULL,
    published_at  timestamptz NULL,
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text        NULL,
    aggregate_key text        NOT NULL DEFAULT '', -- the order id: one order's answers stay in order
    key_hash      integer     NOT NULL DEFAULT 0 CHECK (key_hash >= 0), -- outbox.KeyHash(aggregate_key)
    replays       integer     NOT NULL DEFAULT 0,
    trace_context jsonb       NULL
);

-- The relay reads unpublished rows in (occurred_at, id) order; replay finds a period.
CREATE INDEX outbox_unpublished_idx ON outbox (occurred_at, id) WHERE published_at IS NULL;
CREATE INDEX outbox_occurred_at_brin ON outbox USING brin (occurred_at);

-- The SQL twin of outbox.KeyHash.
CREATE FUNCTION outbox_key_hash(key text) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN CASE WHEN key = '' THEN 0
                ELSE (('x' || left(md5(key), 8))::bit(32)::integer) & 2147483647 END;

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

-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'stock_relay') THEN
        CREATE ROLE stock_relay NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL; -- created by a concurrent migration
END
$$;
-- +goose StatementEnd

GRANT INSERT ON outbox TO stock_app;
GRANT SELECT ON outbox TO stock_relay;
GRANT UPDATE (published_at, attempts, last_error) ON outbox TO stock_relay;
GRANT SELECT, DELETE ON outbox TO stock_maintenance;
GRANT UPDATE (published_at, attempts, last_error, replays) ON outbox TO stock_maintenance;

-- +goose Down
REVOKE ALL ON outbox FROM stock_app, stock_relay, stock_maintenance;
DROP TRIGGER outbox_inserted ON outbox;
DROP FUNCTION outbox_notify();
DROP FUNCTION outbox_key_hash(text);
DROP TABLE outbox;
