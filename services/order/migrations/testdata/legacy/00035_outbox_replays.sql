-- +goose Up
-- Outbox replay (docs/operations.md, "Replaying a period of the outbox"): a
-- replayed row is put back in line (published_at = NULL) and counts its
-- replays here, so the table keeps one row per event. The BRIN index lets
-- replay find a period of occurred_at without scanning the whole table, at
-- almost no cost to the inserts.
ALTER TABLE outbox ADD COLUMN replays integer NOT NULL DEFAULT 0;
CREATE INDEX outbox_occurred_at_brin ON outbox USING brin (occurred_at);

-- +goose Down
DROP INDEX outbox_occurred_at_brin;
ALTER TABLE outbox DROP COLUMN replays;
