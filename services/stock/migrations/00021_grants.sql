-- Least privilege (docs/operations.md, "Database roles"). deploy/postgres/roles.sql
-- creates the login roles; this migration creates any that is missing as NOLOGIN,
-- so that its grants are never skipped, and grants each role what it needs on
-- stock's own tables (the platform's inbox and dead letters grant on theirs, to the
-- roles migrations.Schema names):
--   stock_app          stock serve: the reservations and its copy of order statuses
--   auditor            SELECT on every table, also on tables later migrations create
-- Every later migration that creates a table grants on it too.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['stock_app', 'auditor'] LOOP
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

GRANT SELECT, INSERT, UPDATE, DELETE ON order_status, reservation TO stock_app;

GRANT SELECT ON ALL TABLES IN SCHEMA public TO auditor;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO auditor;

-- +goose Down
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM auditor;
REVOKE ALL ON order_status, reservation FROM stock_app;
REVOKE SELECT ON ALL TABLES IN SCHEMA public FROM auditor;
