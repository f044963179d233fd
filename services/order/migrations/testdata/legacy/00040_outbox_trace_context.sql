-- +goose Up
-- The trace context of the transaction that wrote each outbox row (docs/architecture.md,
-- "Tracing"): the W3C Trace Context carrier {"traceparent": ..., "tracestate": ...} of the
-- span the row was written in, NULL when the write was not traced. The relay publishes the
-- row in a span that is a child of it, so one trace runs from the API call to every
-- consumer. It is kept beside the envelope, not in it: the event's content does not change.
ALTER TABLE outbox ADD COLUMN trace_context jsonb NULL;

-- +goose Down
ALTER TABLE outbox DROP COLUMN trace_context;
