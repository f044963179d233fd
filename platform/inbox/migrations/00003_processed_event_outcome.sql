-- A key `dlq drop` writes (docs/inbox.md, "The table"; docs/operations.md, "Dead
-- letters"): outcome 'dropped' marks a message an operator decided not to apply, in
-- the transaction that closes its dead letter. The consumer reads no outcome: a later
-- copy of the message finds the key and is a duplicate, as for a key it processed
-- itself (outcome NULL). `dlq undrop` deletes a dropped key, never a processed one.
-- The column costs no row space: a NULL is a bit of the row's null bitmap, whose one
-- byte (up to 8 columns) fits in the header's padding (23 bytes aligned to 24).
-- Adding it reads the table once to check the constraint, blocking writes meanwhile.
-- maintenance runs dlq: it inserts dropped keys (and already deletes keys).

-- +goose Up
ALTER TABLE processed_event ADD COLUMN IF NOT EXISTS outcome text NULL CHECK (outcome = 'dropped');
GRANT INSERT (consumer, message_key, payload_sha256, outcome) ON processed_event TO {{.maintenance}};

-- +goose Down
REVOKE INSERT ON processed_event FROM {{.maintenance}};
ALTER TABLE processed_event DROP COLUMN outcome;
