-- Least privilege (docs/operations.md, "Database roles"). deploy/postgres/roles.sql
-- creates the login roles; this migration creates any that is missing as NOLOGIN,
-- so that its grants are never skipped, and grants each role what it needs:
--   order_api          order serve: orders and their lines, idempotency keys, and
--                      only INSERT into outbox (it can neither mark nor delete events)
--   order_relay        order relay: reads outbox and updates only published_at,
--                      attempts and last_error; nothing on orders
--   order_maintenance  order purge-outbox and replay-outbox: deletes published rows,
--                      clears published_at
--   auditor            SELECT on every table, also on tables later migrations create
-- No role may DELETE orders. Every later migration that creates a table grants on it too.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['order_api', 'order_relay', 'order_maintenance', 'auditor'] LOOP
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

GRANT SELECT, INSERT, UPDATE ON orders, order_line TO order_api;
GRANT SELECT, INSERT, UPDATE ON processed_event TO order_api;
GRANT INSERT ON outbox TO order_api;

GRANT SELECT ON outbox TO order_relay;
GRANT UPDATE (published_at, attempts, last_error) ON outbox TO order_relay;

GRANT SELECT, DELETE ON outbox TO order_maintenance;
GRANT UPDATE (published_at, attempts, last_error) ON outbox TO order_maintenance;
GRANT SELECT, DELETE ON processed_event TO order_maintenance;

GRANT SELECT ON ALL TABLES IN SCHEMA public TO auditor;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO auditor;

-- +goose Down
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM auditor;
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM order_api, order_relay, order_maintenance, auditor;
