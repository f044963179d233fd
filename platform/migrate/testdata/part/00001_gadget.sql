-- +goose Up
CREATE TABLE gadget (id bigint PRIMARY KEY);
GRANT SELECT ON gadget TO {{.reader}};

-- +goose Down
DROP TABLE gadget;
