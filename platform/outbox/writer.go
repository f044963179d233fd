// Package outbox implements the transactional outbox: a Writer that records an
// event in the caller's database transaction, and a relay that publishes the
// recorded events to the broker (docs/architecture.md, rules 1 and 2).
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
)

// NotifyChannel is the PostgreSQL LISTEN/NOTIFY channel the order migration's
// statement-level AFTER INSERT trigger on outbox signals (pg_notify with an
// empty payload), so a relay can wake up at once instead of waiting for its
// next poll.
const NotifyChannel = "outbox_inserted"

// Writer builds event envelopes, checks them against the contract schemas and
// inserts them as outbox rows inside the caller's transaction (docs/architecture.md,
// rule 1). A Writer is immutable and safe for concurrent use.
type Writer struct {
	validator *contracts.Validator
	producer  string
	now       func() time.Time
	mutate    func(*contracts.Envelope)
}

// WriterOption configures a Writer built by NewWriter.
type WriterOption func(*Writer)

// WithClock makes the Writer read the current time from now instead of
// time.Now; occurred_at is that time truncated to milliseconds in UTC.
func WithClock(now func() time.Time) WriterOption {
	return func(w *Writer) { w.now = now }
}

// WithEnvelopeHook makes the Writer call hook on every envelope after it is
// built and before it is validated. It exists for tests that corrupt an
// envelope to prove that a schema failure rolls the whole transaction back;
// production code never sets it.
func WithEnvelopeHook(hook func(*contracts.Envelope)) WriterOption {
	return func(w *Writer) { w.mutate = hook }
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

// Write records one event in tx: it builds the envelope with
// contracts.NewEnvelope (a fresh UUID v7 event_id, occurred_at at millisecond
// precision, the Writer's producer, contracts.SchemaVersion, correlationID),
// validates the marshalled envelope against the contract and inserts it into
// outbox with id = event_id and routing_key = eventName. The statement-level
// trigger on outbox then notifies NotifyChannel when tx commits.
//
// It returns the envelope written. On any error nothing is inserted and the
// caller must roll tx back (pg.WithTx does so when its function returns the
// error). A contract violation is returned wrapping the *contracts.ValidationError
// that names the offending field, for example "payload.lines[0].quantity"; an
// unknown eventName wraps contracts.ErrUnknownEvent.
func (w *Writer) Write(ctx context.Context, tx pgx.Tx, eventName, correlationID string, payload any) (contracts.Envelope, error) {
	env, err := contracts.NewEnvelope(eventName, w.producer, correlationID, payload, w.now())
	if err != nil {
		return contracts.Envelope{}, fmt.Errorf("outbox: build %s envelope: %w", eventName, err)
	}
	if w.mutate != nil {
		w.mutate(&env)
	}
	body, err := json.Marshal(env)
	if err != nil {
		return contracts.Envelope{}, fmt.Errorf("outbox: marshal %s envelope: %w", eventName, err)
	}
	if err := w.validator.Validate(body); err != nil {
		return contracts.Envelope{}, fmt.Errorf("outbox: invalid %s envelope: %w", eventName, err)
	}
	_, err = tx.Exec(ctx,
		`INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at) VALUES ($1, $2, $3, $4, $5)`,
		env.EventID, env.EventName, env.EventName, string(body), env.OccurredAt)
	if err != nil {
		return contracts.Envelope{}, fmt.Errorf("outbox: insert %s event %s: %w", eventName, env.EventID, err)
	}
	return env, nil
}
