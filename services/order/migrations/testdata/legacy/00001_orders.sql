-- +goose Up
-- Orders and their lines (docs/architecture.md, "Processes and ports").
CREATE TABLE orders (
    id          uuid        PRIMARY KEY,
    customer_id uuid        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('draft', 'placed', 'cancelled')),
    version     integer     NOT NULL CHECK (version >= 1),
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

CREATE INDEX orders_customer_id_idx ON orders (customer_id);

CREATE TABLE order_line (
    order_id   uuid          NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    product_id uuid          NOT NULL,
    quantity   numeric(12,3) NOT NULL CHECK (quantity > 0),
    line_no    integer       NOT NULL CHECK (line_no >= 0), -- keeps the order the client sent
    PRIMARY KEY (order_id, product_id),
    UNIQUE (order_id, line_no)
);

-- +goose Down
DROP TABLE order_line;
DROP TABLE orders;
