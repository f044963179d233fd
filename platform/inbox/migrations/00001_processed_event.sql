-- The inbox (docs/inbox.md): one row per message key a consumer has handled, written
-- in the transaction of the message's effect (docs/architecture.md, rule 3).
-- The service's roles fill the placeholders (inbox.Roles): app handles messages
-- (inserts keys, stores the result of mode ReturnStored), maintenance runs
-- purge-inbox (deletes old keys).
-- A service that created processed_event with its own migrations, before the
-- platform shipped it, keeps its table and rows (IF NOT EXISTS); its privileges
-- are set anew.

-- +goose Up
CREATE TABLE IF NOT EXISTS processed_event (
    consumer       text        NOT NULL,
    message_key    text        NOT NULL CHECK (octet_length(message_key) BETWEEN 1 AND 255), -- msgkey.MaxLen
    payload_sha256 bytea       CHECK (octet_length(payload_sha256) = 32), -- NULL: content unknown, never a conflict
    result         jsonb,                                                  -- mode ReturnStored
    processed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_key)
);

-- Purges delete by age (00002 replaces this index with a BRIN index).
CREATE INDEX IF NOT EXISTS processed_event_processed_at_idx ON processed_event (processed_at);

REVOKE ALL ON processed_event FROM {{.app}}, {{.maintenance}};
GRANT SELECT, INSERT, UPDATE (result) ON processed_event TO {{.app}};
GRANT SELECT, DELETE ON processed_event TO {{.maintenance}};

-- +goose Down
DROP TABLE processed_event;
