-- What a consumer dead-lettered and why (docs/operations.md, "Dead letters").
-- The consumer writes a row before it publishes the dead-lettered copy, so a
-- message in its dead-letter queue always has its row; a crash in between leaves at
-- worst a row for a message that is still in its queue and comes again.
-- `dlq replay` and `dlq drop` set resolved_at and resolution.
-- The service's roles fill the placeholders (dlq.Roles): app records dead letters,
-- maintenance runs dlq and resolves them. A service that created dead_letter with
-- its own migrations, before the platform shipped it, keeps its table and rows (IF
-- NOT EXISTS); its privileges are set anew.

-- +goose Up
CREATE TABLE IF NOT EXISTS dead_letter (
    id               bigserial   PRIMARY KEY,
    consumer         text        NOT NULL,
    -- The event_id as text for an event envelope; for a message without a
    -- usable event_id, its AMQP message_id, else 'sha256:' and the hex
    -- SHA-256 of its body.
    message_key      text        NOT NULL,
    event_id         uuid        NULL,
    event_name       text        NULL,
    reason           text        NOT NULL, -- the handler's last error
    attempts         integer     NOT NULL,
    dead_lettered_at timestamptz NOT NULL DEFAULT now(),
    resolved_at      timestamptz NULL,
    resolution       text        NULL CHECK (resolution IN ('replayed', 'dropped')),
    CHECK ((resolved_at IS NULL) = (resolution IS NULL))
);

CREATE INDEX IF NOT EXISTS dead_letter_key_idx ON dead_letter (consumer, message_key);
CREATE INDEX IF NOT EXISTS dead_letter_open_idx ON dead_letter (consumer, dead_lettered_at) WHERE resolved_at IS NULL;

REVOKE ALL ON dead_letter FROM {{.app}}, {{.maintenance}};
REVOKE ALL ON SEQUENCE dead_letter_id_seq FROM {{.app}}, {{.maintenance}};
GRANT SELECT, INSERT ON dead_letter TO {{.app}};
GRANT USAGE ON SEQUENCE dead_letter_id_seq TO {{.app}};
GRANT SELECT, UPDATE (resolved_at, resolution) ON dead_letter TO {{.maintenance}};

-- +goose Down
DROP TABLE dead_letter;
