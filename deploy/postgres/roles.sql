-- The shop's PostgreSQL login roles, one per process (docs/operations.md, "Database
-- roles"). Run it as a superuser against the postgres database, before the first
-- `migrate`, and again whenever you like: it changes nothing the second time.
--
--   psql -v ON_ERROR_STOP=1 -U postgres -d postgres -f deploy/postgres/roles.sql
--
-- It sets no password: the deployment sets them (ALTER ROLE ... PASSWORD, or your
-- secret store); local trust authentication needs none. The privileges come from
-- each service's `migrate`, which runs as the owner of its database and grants
-- (on the platform's tables, to the roles its migrations.Schema names):
--
--   order_api             order serve (the API and the consumer of stock's answers)
--   order_relay           order relay
--   order_maintenance     order purge-outbox, order replay-outbox, order purge-inbox, order dlq
--   stock_app             stock serve
--   stock_relay           stock relay
--   stock_maintenance     stock purge-inbox, stock dlq, stock purge-outbox, stock replay-outbox
--   shipping_app          shipping serve
--   shipping_maintenance  shipping purge-inbox, shipping dlq
--   auditor               SELECT on every table of the three databases, read-only sessions

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['order_api', 'order_relay', 'order_maintenance',
                             'stock_app', 'stock_relay', 'stock_maintenance',
                             'shipping_app', 'shipping_maintenance', 'auditor'] LOOP
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
                EXECUTE format('CREATE ROLE %I LOGIN', r);
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL; -- created meanwhile by a migration or a concurrent run
        END;
        -- A migration that ran first created it NOLOGIN; no role gets more than login.
        EXECUTE format('ALTER ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS', r);
    END LOOP;
END
$$;

-- Even a mistaken GRANT cannot make the auditor write.
ALTER ROLE auditor SET default_transaction_read_only = on;
