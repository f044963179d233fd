-- Least privilege (docs/operations.md, "Database roles"). deploy/postgres/roles.sql
-- creates the login roles; this migration creates any that is missing as NOLOGIN,
-- so that its grants are never skipped, and grants each role what it needs:
--   stock_app          stock serve: the inbox, the reservations, recording dead letters
--   stock_maintenance  stock purge-inbox and stock dlq: deletes old keys, resolves dead letters
--   auditor            SELECT on every table, also on tables later migrations create
-- Every later migration that creates a table grants on it too.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['stock_app', 'stock_maintenance', 'auditor'] LOOP
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL; -- created by a concurrent migration
        END;
    END LOOP;
END
$$;
-- +goose StatementEnd

GRANT SELECT, INSERT ON processed_event TO stock_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON order_status, reservation TO stock_app;
GRANT SELECT, INSERT ON dead_letter TO stock_app;
GRANT USAGE ON SEQUENCE dead_letter_id_seq TO stock_app;

GRANT SELECT, DELETE ON processed_event TO stock_maintenance;
GRANT SELECT ON dead_letter TO stock_maintenance;
GRANT UPDATE (resolved_at, resolution) ON dead_letter TO stock_maintenance;

GRANT SELECT ON ALL TABLES IN SCHEMA public TO auditor;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO auditor;

-- +goose Down
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM auditor;
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM stock_app, stock_maintenance, auditor;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM stock_app;
