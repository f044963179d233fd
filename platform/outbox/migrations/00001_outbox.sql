-- The transactional outbox (docs/architecture.md, rules 1 and 2): one row per event,
-- written in the transaction of the business change, published by the relay.
-- The service's roles fill the placeholders (outbox.Roles): writer inserts events,
-- relay publishes them (marks published_at, counts failed attempts), maintenance
-- runs purge-outbox and replay-outbox. A service that created outbox with its own
-- migrations, before the platform shipped it, keeps its table and rows (IF NOT
-- EXISTS, OR REPLACE); its privileges are set anew.

-- +goose Up
CREATE TABLE IF NOT EXISTS outbox (
    id            uuid        PRIMARY KEY, -- the envelope's event_id (UUID v7)
    event_name    text        NOT NULL,
    routing_key   text        NOT NULL,
    envelope      jsonb       NOT NULL,
    occurred_at   timestamptz NOT NULL,
    published_at  timestamptz NULL,
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text        NULL,
    -- Relay partitions (docs/adr/0007-relay-partitions.md): the key of the aggregate
    -- whose events stay in order (an order's id) and a stable hash of it; a relay with
    -- N partitions publishes partition key_hash % N. '' hashes to 0.
    aggregate_key text        NOT NULL DEFAULT '',
    key_hash      integer     NOT NULL DEFAULT 0 CHECK (key_hash >= 0),
    -- Replays of the row (docs/operations.md, "Replaying a period of the outbox").
    replays       integer     NOT NULL DEFAULT 0,
    -- The W3C Trace Context carrier of the span the row was written in, NULL when
    -- untraced (docs/architecture.md, "Tracing"); kept beside the envelope, not in it.
    trace_context jsonb       NULL
);

-- The relay reads unpublished rows in (occurred_at, id) order; replay finds a
-- period of occurred_at through the BRIN index at almost no cost to inserts.
CREATE INDEX IF NOT EXISTS outbox_unpublished_idx ON outbox (occurred_at, id) WHERE published_at IS NULL;
CREATE INDEX IF NOT EXISTS outbox_occurred_at_brin ON outbox USING brin (occurred_at);

-- The hash the Writer computes in Go (outbox.KeyHash): the first 32 bits of the
-- key's MD5, as a non-negative integer; 0 for ''.
CREATE OR REPLACE FUNCTION outbox_key_hash(key text) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN CASE WHEN key = '' THEN 0
                ELSE (('x' || left(md5(key), 8))::bit(32)::integer) & 2147483647 END;

-- Wake a listening relay once per inserting statement (outbox.NotifyChannel).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_inserted', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE OR REPLACE TRIGGER outbox_inserted
    AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

REVOKE ALL ON outbox FROM {{.writer}}, {{.relay}}, {{.maintenance}};
GRANT INSERT ON outbox TO {{.writer}};
GRANT SELECT, UPDATE (published_at, attempts, last_error) ON outbox TO {{.relay}};
GRANT SELECT, DELETE, UPDATE (published_at, attempts, last_error, replays) ON outbox TO {{.maintenance}};

-- +goose Down
DROP TABLE outbox;
DROP FUNCTION outbox_notify();
DROP FUNCTION outbox_key_hash(text);
