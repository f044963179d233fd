-- Stock held for placed orders: one row per order line. order_status is stock's
-- versioned copy of each order's status (docs/architecture.md, rule 4, as in shipping): an event
-- changes reservations only when its version wins the upsert on that row. The row
-- lock taken by the upsert also serialises the placed and cancelled events of one
-- order, so a cancel processed at the same moment as its place, or a retried place
-- delivered after its cancel, never leaves stock held for a cancelled order.

-- +goose Up
CREATE TABLE order_status (
    order_id   uuid        PRIMARY KEY,
    status     text        NOT NULL CHECK (status IN ('placed', 'cancelled')),
    version    integer     NOT NULL CHECK (version >= 1),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE reservation (
    id         uuid          PRIMARY KEY,           -- UUID v7
    order_id   uuid          NOT NULL REFERENCES order_status (order_id),
    line_no    integer       NOT NULL CHECK (line_no >= 1),  -- position of the line in the order, from 1
    product_id uuid          NOT NULL,
    quantity   numeric(12,3) NOT NULL CHECK (quantity > 0),
    created_at timestamptz   NOT NULL DEFAULT now(),
    -- A second guard besides processed_event: a line is never reserved twice.
    CONSTRAINT reservation_order_line_key UNIQUE (order_id, line_no)
);

-- +goose Down
DROP TABLE reservation;
DROP TABLE order_status;
