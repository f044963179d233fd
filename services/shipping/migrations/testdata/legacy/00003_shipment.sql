-- +goose Up
-- One shipment per order, kept in step with the winning order_status.
CREATE TABLE shipment (
    id         uuid        PRIMARY KEY,
    order_id   uuid        NOT NULL UNIQUE REFERENCES order_status (order_id),
    status     text        NOT NULL CHECK (status IN ('pending', 'ready', 'cancelled')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE shipment;
