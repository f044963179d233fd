-- +goose Up
-- The versioned copy of each order's status (docs/architecture.md, rule 4): a row only
-- ever moves to a higher version.
CREATE TABLE order_status (
    order_id   uuid        PRIMARY KEY,
    status     text        NOT NULL CHECK (status IN ('placed', 'cancelled')),
    version    integer     NOT NULL CHECK (version >= 1),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE order_status;
