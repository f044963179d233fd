-- A reservation is held until its order's cancel releases it; a released row stays, so
-- GET /reservations shows that a cancel took effect. The versioned copy in order_status
-- still decides whether an event applies (docs/architecture.md rule 4).

-- +goose Up
ALTER TABLE reservation
    ADD COLUMN status      text        NOT NULL DEFAULT 'held' CHECK (status IN ('held', 'released')),
    ADD COLUMN released_at timestamptz NULL,
    ADD CONSTRAINT reservation_released_at_check CHECK ((status = 'released') = (released_at IS NOT NULL));

-- +goose Down
DELETE FROM reservation WHERE status = 'released';
ALTER TABLE reservation
    DROP CONSTRAINT reservation_released_at_check,
    DROP COLUMN released_at,
    DROP COLUMN status;
