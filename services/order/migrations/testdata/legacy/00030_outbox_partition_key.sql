-- +goose Up
-- Relay partitions (docs/architecture.md, rule 2; docs/adr/0007-relay-partitions.md).
-- Every outbox row carries the key of the aggregate whose events must stay in
-- order (the order id) and a stable hash of it; a relay configured with N
-- partitions publishes partition key_hash % N. The hash is stored, the
-- partition is not, so RELAY_PARTITIONS can change without rewriting rows.
-- A row without a key ('') hashes to 0: keyless rows stay in one sequence.
ALTER TABLE outbox ADD COLUMN aggregate_key text NOT NULL DEFAULT '';
ALTER TABLE outbox ADD COLUMN key_hash integer NOT NULL DEFAULT 0
    CHECK (key_hash >= 0);

-- The hash the Writer computes in Go (outbox.KeyHash): the first 32 bits of
-- the key's MD5, as a non-negative integer; 0 for ''.
CREATE FUNCTION outbox_key_hash(key text) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN CASE WHEN key = '' THEN 0
                ELSE (('x' || left(md5(key), 8))::bit(32)::integer) & 2147483647 END;

-- +goose Down
DROP FUNCTION outbox_key_hash(text);
ALTER TABLE outbox DROP COLUMN key_hash;
ALTER TABLE outbox DROP COLUMN aggregate_key;
