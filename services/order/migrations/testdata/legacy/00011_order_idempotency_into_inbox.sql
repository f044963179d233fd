-- POST /orders kept its Idempotency-Keys in order_idempotency; they move into the
-- inbox (00010), so a retry with a key used before this migration still creates
-- nothing. Such a key gets the order it created as it is at the migration as its
-- stored answer, and no request hash (payload_sha256 NULL: the content is
-- unknown, so any request with that key is answered as a retry, never as a 422).

-- +goose Up
INSERT INTO processed_event (consumer, message_key, payload_sha256, result, processed_at)
SELECT 'order-api', k.key, NULL,
       jsonb_build_object(
           'status', 201,
           'location', '/orders/' || o.id,
           'body', json_build_object(
               'id', o.id,
               'customer_id', o.customer_id,
               'status', o.status,
               'version', o.version,
               'lines', (SELECT coalesce(json_agg(json_build_object('product_id', l.product_id, 'quantity', l.quantity::text)
                                                  ORDER BY l.line_no), '[]')
                         FROM order_line l WHERE l.order_id = o.id),
               'created_at', to_char(o.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
               'updated_at', to_char(o.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
           )::text || E'\n'),
       k.created_at
FROM order_idempotency k
JOIN orders o ON o.id = k.order_id
ON CONFLICT DO NOTHING;

DROP TABLE order_idempotency;

-- +goose Down
CREATE TABLE order_idempotency (
    key          text        PRIMARY KEY,
    request_hash bytea       NOT NULL, -- SHA-256 of the normalised request
    order_id     uuid        NOT NULL REFERENCES orders (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX order_idempotency_created_at_idx ON order_idempotency (created_at);
