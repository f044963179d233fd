-- +goose Up
CREATE TABLE widget (id bigint PRIMARY KEY, name text NOT NULL);

-- +goose Down
DROP TABLE widget;
