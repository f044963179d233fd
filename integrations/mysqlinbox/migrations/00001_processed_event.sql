-- processed_event on MySQL 8 / MariaDB 10.6+: the columns and meaning of the
-- PostgreSQL table (package inbox). Keys are bytes: VARBINARY compares them byte
-- for byte, where a _ci collation would make "Key" and "key" one message and a
-- PAD SPACE one "k" and "k ". The table, not the caller, holds the 255-byte limit.

-- +goose Up
CREATE TABLE processed_event (
    consumer       VARBINARY(255) NOT NULL,
    message_key    VARBINARY(255) NOT NULL,
    payload_sha256 BINARY(32)     NULL,     -- NULL: content unknown, never a conflict
    result         JSON           NULL,     -- mode ReturnStored
    processed_at   DATETIME(6)    NOT NULL, -- UTC, written by the store
    PRIMARY KEY (consumer, message_key),
    KEY processed_event_processed_at_idx (processed_at),
    CONSTRAINT processed_event_key_length CHECK (LENGTH(message_key) BETWEEN 1 AND 255),
    CONSTRAINT processed_event_consumer_length CHECK (LENGTH(consumer) >= 1)
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE processed_event;
