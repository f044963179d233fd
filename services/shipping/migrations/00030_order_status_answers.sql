-- +goose Up
-- The order's copy knows stock's answer (docs/architecture.md, rules 4 and 7):
-- confirmed makes the shipment ready, rejected cancels it; placed leaves it pending.
ALTER TABLE order_status DROP CONSTRAINT order_status_status_check;
ALTER TABLE order_status ADD CONSTRAINT order_status_status_check
    CHECK (status IN ('placed', 'confirmed', 'rejected', 'cancelled'));

-- +goose Down
-- Fails while a copy is confirmed or rejected: the old schema cannot keep them.
ALTER TABLE order_status DROP CONSTRAINT order_status_status_check;
ALTER TABLE order_status ADD CONSTRAINT order_status_status_check CHECK (status IN ('placed', 'cancelled'));
