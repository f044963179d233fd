-- Smaller keys on disk (docs/inbox.md, "The table"): about 178 -> 171 MiB per
-- million keys, which bounds how long keys can be kept.
-- - Purges find old keys through a BRIN index on processed_at instead of a B-tree
--   (about 21 MiB per million keys): rows arrive in processed_at order, so block
--   range summaries find them in a few pages. Building it reads the table once and
--   blocks writes to it meanwhile.
-- - The primary key's pages split full: keys arrive almost in order (v7 event ids),
--   so pages are not written again, and a page split at 90 % (the default) stays so.
--   Existing pages keep their fill until a REINDEX.

-- +goose Up
DROP INDEX IF EXISTS processed_event_processed_at_idx;
CREATE INDEX IF NOT EXISTS processed_event_processed_at_brin ON processed_event USING brin (processed_at);
ALTER INDEX IF EXISTS processed_event_pkey SET (fillfactor = 100);

-- +goose Down
ALTER INDEX IF EXISTS processed_event_pkey RESET (fillfactor);
DROP INDEX IF EXISTS processed_event_processed_at_brin;
CREATE INDEX IF NOT EXISTS processed_event_processed_at_idx ON processed_event (processed_at);
