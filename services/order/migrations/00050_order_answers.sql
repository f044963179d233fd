-- +goose Up
-- Stock's answer (docs/architecture.md, rule 7): a placed order moves to confirmed or
-- rejected. A rejected order keeps why, as stock said it:
-- {"reason": "insufficient_stock", "lines": [{"product_id", "requested", "available"}]}.
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders
    ADD CONSTRAINT orders_status_check
        CHECK (status IN ('draft', 'placed', 'confirmed', 'rejected', 'cancelled')),
    ADD COLUMN rejection jsonb NULL,
    ADD CONSTRAINT orders_rejection_check CHECK ((status = 'rejected') = (rejection IS NOT NULL));

-- +goose Down
-- Fails while an order is confirmed or rejected: the old schema cannot keep them.
ALTER TABLE orders DROP CONSTRAINT orders_rejection_check, DROP COLUMN rejection;
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check CHECK (status IN ('draft', 'placed', 'cancelled'));
