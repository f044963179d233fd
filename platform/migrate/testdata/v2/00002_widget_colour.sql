-- +goose Up
ALTER TABLE widget ADD COLUMN colour text NOT NULL DEFAULT 'red';

-- +goose Down
ALTER TABLE widget DROP COLUMN colour;
