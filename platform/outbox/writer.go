package outbox

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"example.com/shop/contracts"
)

// NotifyChannel is the PostgreSQL LISTEN/NOTIFY channel the order migration's
// statement-level AFTER INSERT trigger on outbox signals (pg_notify with an
// empty payload), so a relay can wake up at once instead of waiting for its
// next poll.
const NotifyChannel = "outbox_inserted"

// Writer builds event envelopes, checks them against the contract schemas and
// inserts them as outbox rows inside the caller's transaction
// (docs/architecture.md, rule 1). A Writer is immutable and safe for concurrent use.
type Writer struct {
	validator *contracts.Validator
	producer  string
	now       func() time.Time
}

// WriterOption configures a Writer built by NewWriter.
type WriterOption func(*Writer)

// WithClock makes the Writer read the current time from now instead of
// time.Now; occurred_at is that time truncated to milliseconds in UTC.
func WithClock(now func() time.Time) WriterOption {
	return func(w *Writer) { w.now = now }
}

// NewWriter returns a Writer that validates with v and stamps producer (for
// example contracts.ProducerOrder) on every envelope.
func NewWriter(v *contracts.Validator, producer string, opts ...WriterOption) *Writer {
	w := &Writer{validator: v, producer: producer, now: time.Now}
	for _, opt := range opts {
		opt(w)
	}
	return w
}

// KeyHash is the stable hash of an aggregate key that decides its relay
// partition (KeyHash(key) % RelayConfig.Partitions, docs/architecture.md,
// rule 2): the first 32 bits of the key's MD5 as a non-negative int32, and 0
// for the empty key. It equals the SQL function outbox_key_hash of the
// outbox migration, and never changes: it is stored with the row.
func KeyHash(key string) int32 {
	if key == "" {
		return 0
	}
	sum := md5.Sum([]byte(key))
	return int32(binary.BigEndian.Uint32(sum[:4]) & 0x7fffffff)
}

// Write records one event in tx: it builds the envelope (a fresh UUID v7
// event_id, occurred_at at millisecond precision, the Writer's producer,
// contracts.SchemaVersion, correlationID, payload), encodes it once, payload
// included, validates those bytes against the contract and inserts the same
// bytes into outbox with id = event_id, routing_key = eventName,
// aggregate_key = aggregateKey and key_hash = KeyHash(aggregateKey). The
// relay keeps the events of one aggregateKey (the order id) in order
// (docs/architecture.md, rule 2); an empty key puts the row in one sequence
// with every other keyless row. When ctx holds a span context (traced or only
// propagated), its W3C Trace Context goes into the row's trace_context column,
// so that the relay publishes the event in the same trace (docs/architecture.md,
// "Tracing"); otherwise trace_context is NULL. The statement-level trigger on
// outbox then notifies NotifyChannel when tx commits.
//
// It returns the envelope written, its Payload a slice of the encoded bytes.
// On any error nothing is inserted and the caller must roll tx back
// (pg.WithTx does so when its function returns the error). A contract
// violation is returned wrapping the *contracts.ValidationError that names
// the offending field, for example "payload.lines[0].quantity"; an unknown
// eventName wraps contracts.ErrUnknownEvent.
func (w *Writer) Write(ctx context.Context, tx pgx.Tx, eventName, aggregateKey, correlationID string, payload any) (contracts.Envelope, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return contracts.Envelope{}, fmt.Errorf("outbox: %s event id: %w", eventName, err)
	}
	env := contracts.Envelope{EventID: id, EventName: eventName, OccurredAt: w.now().UTC().Truncate(time.Millisecond),
		Producer: w.producer, SchemaVersion: contracts.SchemaVersion, CorrelationID: correlationID}
	body, err := json.Marshal(wireEnvelope{EventID: id, EventName: eventName, OccurredAt: contracts.CloudEventsTime(env.OccurredAt),
		Producer: w.producer, SchemaVersion: env.SchemaVersion, CorrelationID: correlationID, Payload: payload})
	if err != nil {
		return contracts.Envelope{}, fmt.Errorf("outbox: encode %s envelope: %w", eventName, err)
	}
	if err := w.validator.Validate(body); err != nil {
		return contracts.Envelope{}, fmt.Errorf("outbox: invalid %s envelope: %w", eventName, err)
	}
	// body goes to the jsonb column as it is ([]byte is sent as JSON text).
	_, err = tx.Exec(ctx,
		`INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, aggregate_key, key_hash, trace_context)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		env.EventID, env.EventName, env.EventName, body, env.OccurredAt, aggregateKey, KeyHash(aggregateKey), traceContext(ctx))
	if err != nil {
		return contracts.Envelope{}, fmt.Errorf("outbox: insert %s event %s: %w", eventName, env.EventID, err)
	}
	env.Payload = payloadOf(body)
	return env, nil
}

// wireEnvelope is contracts.Envelope as it is sent (Envelope.MarshalJSON's
// form), with the payload as the caller's value: json.Marshal encodes the
// whole event in one pass, with no intermediate payload bytes to copy and
// scan again.
type wireEnvelope struct {
	EventID       uuid.UUID `json:"event_id"`
	EventName     string    `json:"event_name"`
	OccurredAt    string    `json:"occurred_at"`
	Producer      string    `json:"producer"`
	SchemaVersion int       `json:"schema_version"`
	CorrelationID string    `json:"correlation_id"`
	Payload       any       `json:"payload"`
}

// payloadOf is the payload's JSON within body, an encoded wireEnvelope: the
// payload is its last field, and the first `,"payload":` is its key, since a
// quote inside an earlier string value is escaped.
func payloadOf(body []byte) json.RawMessage {
	const key = `,"payload":`
	i := bytes.Index(body, []byte(key))
	if i < 0 || len(body) == 0 {
		return nil
	}
	return json.RawMessage(body[i+len(key) : len(body)-1])
}

// traceContext is the W3C Trace Context carrier of the span context in ctx, as
// the trace_context column stores it, or nil (NULL) when ctx holds none.
func traceContext(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier
}
