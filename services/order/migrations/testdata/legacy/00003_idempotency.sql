-- +goose Up
-- Idempotency-Key of POST /orders: a retried create with the same key and the
-- same request returns the order the first one created.
CREATE TABLE order_idempotency (
    key          text        PRIMARY KEY,
    request_hash bytea       NOT NULL, -- SHA-256 of the normalised request
    order_id     uuid        NOT NULL REFERENCES orders (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX order_idempotency_created_at_idx ON order_idempotency (created_at);

-- +goose Down
DROP TABLE order_idempotency;
