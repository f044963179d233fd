-- Keep the relay's scan short (docs/performance.md, "The relay's scan and vacuum").
-- Marking a row published leaves its entry in outbox_unpublished_idx until a vacuum
-- removes it, and every batch the relay selects walks the entries of the rows
-- published since the last one (about 9 ns each once the first scan has marked
-- them dead, far more before). Left to the defaults, that walk grows with the table:
-- - autovacuum waits for 20 % of the table to change, and the outbox keeps its
--   published rows, so a table of 10 million rows would wait for 2 million;
-- - a vacuum skips index cleanup when under 2 % of the table's pages hold dead
--   rows, which a steady stream of updates in a large table always is, so the
--   entries would stay.
-- A vacuum every 10,000 published rows, cleaning the indexes each time, keeps the
-- walk under 10,000 entries plus what is published in one autovacuum_naptime (60 s by
-- default: 22,000 in all at 200 rows/s); it reads the primary key whole each time
-- (about 40 MB per million rows), at most once per naptime.

-- +goose Up
ALTER TABLE outbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000,
    vacuum_index_cleanup = on
);

-- +goose Down
ALTER TABLE outbox RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, vacuum_index_cleanup);
