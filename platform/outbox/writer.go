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

// Entry is one event Prepare has built, encoded and checked against the
// contract, ready for Insert.
type Entry struct {
	// Envelope is the event as written, its Payload a slice of the encoded bytes.
	Envelope     contracts.Envelope
	body         []byte            // the whole envelope, encoded once
	aggregateKey string            // the relay's ordering key
	traceContext map[string]string // W3C Trace Context carrier; nil when untraced
}

// Prepare builds one event's envelope (a fresh UUID v7 event_id, occurred_at
// at millisecond precision, the Writer's producer, contracts.SchemaVersion,
// correlationID, payload), encodes it once, payload included, and validates
// those bytes against the contract; Insert then stores the same bytes. The
// relay keeps the events of one aggregateKey (the order id) in order
// (docs/architecture.md, rule 2); an empty key puts the row in one sequence
// with every other keyless row. When ctx holds a span context (traced or only
// propagated), its W3C Trace Context goes with the entry, so that the relay
// publishes the event in the same trace (docs/architecture.md, "Tracing").
//
// It touches no database. A contract violation is returned wrapping the
// *contracts.ValidationError that names the offending field, for example
// "payload.lines[0].quantity"; an unknown eventName wraps
// contracts.ErrUnknownEvent.
func (w *Writer) Prepare(ctx context.Context, eventName, aggregateKey, correlationID string, payload any) (Entry, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Entry{}, fmt.Errorf("outbox: %s event id: %w", eventName, err)
	}
	env := contracts.Envelope{EventID: id, EventName: eventName, OccurredAt: w.now().UTC().Truncate(time.Millisecond),
		Producer: w.producer, SchemaVersion: contracts.SchemaVersion, CorrelationID: correlationID}
	wire := env.Wire()
	wire.Payload = payload // the whole event in one encoding pass
	body, err := json.Marshal(wire)
	if err != nil {
		return Entry{}, fmt.Errorf("outbox: encode %s envelope: %w", eventName, err)
	}
	if err := w.validator.Validate(body); err != nil {
		return Entry{}, fmt.Errorf("outbox: invalid %s envelope: %w", eventName, err)
	}
	env.Payload = payloadOf(body)
	return Entry{Envelope: env, body: body, aggregateKey: aggregateKey, traceContext: traceContext(ctx)}, nil
}

// insertSQL inserts one outbox row per element of its arrays: id = event_id,
// routing_key = event_name, the envelope's bytes as they were validated
// (jsonb parses the text), and key_hash = KeyHash(aggregate_key).
const insertSQL = `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, aggregate_key, key_hash, trace_context)
	SELECT id, name, name, envelope::jsonb, occurred_at, key, key_hash, trace::jsonb
	FROM unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::int[], $7::text[])
	  AS e(id, name, envelope, occurred_at, key, key_hash, trace)`

// Insert inserts entries as outbox rows in tx, with one statement whatever
// their number (docs/architecture.md, rule 1), so the statement-level trigger
// on outbox notifies NotifyChannel once when tx commits. On an error nothing
// is inserted and the caller must roll tx back (pg.WithTx does so when its
// function returns the error). No entries: it does nothing.
func (w *Writer) Insert(ctx context.Context, tx pgx.Tx, entries ...Entry) error {
	if len(entries) == 0 {
		return nil
	}
	args, err := insertArgs(entries)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, insertSQL, args...); err != nil {
		return insertError(entries, err)
	}
	return nil
}

// Queue adds Insert's statement for entries to b, for a caller that sends it in one
// round trip with its own statements (tx.SendBatch): the statement's result, read in
// its turn from the batch's results, is nil or an error that InsertError explains.
// No entries: it adds nothing and returns false.
func (w *Writer) Queue(b *pgx.Batch, entries ...Entry) (bool, error) {
	if len(entries) == 0 {
		return false, nil
	}
	args, err := insertArgs(entries)
	if err != nil {
		return false, err
	}
	b.Queue(insertSQL, args...)
	return true, nil
}

// InsertError wraps err, the failure of the outbox statement for entries, naming
// the event when there is one.
func InsertError(entries []Entry, err error) error { return insertError(entries, err) }

func insertError(entries []Entry, err error) error {
	if len(entries) == 1 {
		return fmt.Errorf("outbox: insert %s event %s: %w", entries[0].Envelope.EventName, entries[0].Envelope.EventID, err)
	}
	return fmt.Errorf("outbox: insert %d events: %w", len(entries), err)
}

// insertArgs are insertSQL's arguments for entries: one array per column.
func insertArgs(entries []Entry) ([]any, error) {
	n := len(entries)
	ids, names, bodies, keys, traces := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]*string, n)
	times, hashes := make([]time.Time, n), make([]int32, n)
	for i, e := range entries {
		ids[i], names[i], bodies[i], times[i] = e.Envelope.EventID.String(), e.Envelope.EventName, string(e.body), e.Envelope.OccurredAt
		keys[i], hashes[i] = e.aggregateKey, KeyHash(e.aggregateKey)
		if e.traceContext != nil {
			tc, err := json.Marshal(e.traceContext)
			if err != nil {
				return nil, fmt.Errorf("outbox: encode trace context: %w", err)
			}
			s := string(tc)
			traces[i] = &s
		}
	}
	return []any{ids, names, bodies, times, keys, hashes, traces}, nil
}

// Write records one event in tx: Prepare, then Insert. It returns the
// envelope written, with Prepare's and Insert's errors.
func (w *Writer) Write(ctx context.Context, tx pgx.Tx, eventName, aggregateKey, correlationID string, payload any) (contracts.Envelope, error) {
	e, err := w.Prepare(ctx, eventName, aggregateKey, correlationID, payload)
	if err != nil {
		return contracts.Envelope{}, err
	}
	if err := w.Insert(ctx, tx, e); err != nil {
		return contracts.Envelope{}, err
	}
	return e.Envelope, nil
}

// payloadOf is the payload's JSON within body, an encoded contracts.Wire: the
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
