-- Stock held for placed orders: one row per order line. Cancelling an order deletes
-- its rows; cancelled_order remembers the cancellation, so that a placed event that
-- arrives after its order's cancellation (a retried delivery overtaken by the cancel)
-- reserves nothing.

-- +goose Up
CREATE TABLE reservation (
    id         uuid          PRIMARY KEY,           -- UUID v7
    order_id   uuid          NOT NULL,
    line_no    integer       NOT NULL CHECK (line_no >= 1),  -- position of the line in the order, from 1
    product_id uuid          NOT NULL,
    quantity   numeric(12,3) NOT NULL CHECK (quantity > 0),
    created_at timestamptz   NOT NULL DEFAULT now(),
    -- A second guard besides processed_event: a line is never reserved twice.
    CONSTRAINT reservation_order_line_key UNIQUE (order_id, line_no)
);

CREATE TABLE cancelled_order (
    order_id     uuid        PRIMARY KEY,
    version      integer     NOT NULL CHECK (version >= 1),  -- the order's version in the cancel event
    cancelled_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE cancelled_order;
DROP TABLE reservation;
