// Package dlq handles a consuming service's dead letters: it records each one in the
// service's dead_letter table as the consumer dead-letters it, the message included,
// exports how many are open, and runs the `dlq list|show|replay|drop|undrop`
// subcommands that let an operator read why a message failed and put it back in its
// queue, or drop it for good (docs/architecture.md, step 5 of the flow;
// docs/operations.md, "Dead letters").
//
// The record, not the dead-letter queue, is the source of truth: a row is written
// and committed before the copy is published, it keeps the body, properties and
// headers the consumer reads, and replay and drop work from it whether or not the
// queue still holds the copy. A drop is final: it writes the event's processed_event
// key with outcome 'dropped' in the transaction that closes the rows, so the consumer
// skips any later copy; undrop deletes that key and reopens the rows (resolution and
// resolved_at back to NULL). The table is this package's migrations (Migrations),
// applied by each consuming service's migrate:
//
//	CREATE TABLE dead_letter (
//	    id               bigserial   PRIMARY KEY,
//	    consumer         text        NOT NULL,
//	    message_key      text        NOT NULL, -- see Key
//	    event_id         uuid        NULL,
//	    event_name       text        NULL,
//	    reason           text        NOT NULL,
//	    attempts         integer     NOT NULL,
//	    dead_lettered_at timestamptz NOT NULL DEFAULT now(),
//	    resolved_at      timestamptz NULL,
//	    resolution       text        NULL CHECK (resolution IN ('replayed', 'dropped')), -- NULL: open
//	    body             bytea       NULL, -- NULL in rows written before the columns existed
//	    properties       jsonb       NULL, -- message_id, type, content_type, correlation_id, timestamp, exchange, user_id
//	    headers          jsonb       NULL,
//	    routing_key      text        NULL
//	);
package dlq

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/amqp"
)

// Execer is what Record needs of a database handle (a *pgxpool.Pool).
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Identity is what a dead-lettered message is known by.
type Identity struct {
	// Key is the message_key: the event_id as text for an event envelope, else
	// the AMQP message_id, else "sha256:" and the hex SHA-256 of the body.
	Key string
	// EventID is the envelope's event_id, uuid.Nil when it has none.
	EventID uuid.UUID
	// EventName is the envelope's event_name, else the AMQP type, else "".
	EventName string
	// OccurredAt is the envelope's occurred_at, zero when it has none.
	OccurredAt time.Time
}

// Identify reads the identity of a message from its body (decoded loosely: a body
// that fails its schema still has an event_id if it has one at all) and properties.
// The members are read as the consumer's strict decoder reads them
// (contracts.Validator.Decode): names match exactly, and a member given twice counts
// with its last value; so the event_id it shows is the one the inbox keys on.
func Identify(body []byte, messageID, typ string) Identity {
	var members map[string]json.RawMessage
	_ = json.Unmarshal(body, &members) // an undecodable body keeps the zero values
	member := func(name string) string {
		var v string
		_ = json.Unmarshal(members[name], &v) // a missing or non-string member is ""
		return v
	}
	env := struct{ EventID, EventName, OccurredAt string }{
		EventID: member("event_id"), EventName: member("event_name"), OccurredAt: member("occurred_at"),
	}
	id := Identity{EventName: env.EventName}
	if id.EventName == "" {
		id.EventName = typ
	}
	if t, err := time.Parse(time.RFC3339Nano, env.OccurredAt); err == nil {
		id.OccurredAt = t
	}
	if u, err := uuid.Parse(env.EventID); err == nil && u != uuid.Nil {
		id.EventID, id.Key = u, u.String()
		return id
	}
	if messageID != "" {
		id.Key = messageID
		return id
	}
	sum := sha256.Sum256(body)
	id.Key = "sha256:" + hex.EncodeToString(sum[:])
	return id
}

// insertDeadLetter writes one row per dead-lettering. A key dead-lettered again
// before anyone decided about it (a duplicate copy, or the same delivery again after
// a failed publish of its copy) gets a second open row: the dlq commands settle a
// key's open rows together, and a row written while `dlq replay` holds the key's
// rows (the replayed message failed again at once) stays open after it.
const insertDeadLetter = `INSERT INTO dead_letter
    (consumer, message_key, event_id, event_name, reason, attempts, dead_lettered_at,
     body, properties, headers, routing_key)
VALUES ($1, $2, $3, NULLIF($4, ''), $5, $6, $7, $8, $9, $10, NULLIF($11, ''))`

// Record writes a dead_letter row for dl as consumer, with the message's body,
// properties and headers (docs/architecture.md, rule 3). It is the amqp.ConsumerConfig.OnDeadLetter of a consuming service, so
// the row is committed before the dead-lettered copy is published: a copy in the
// dead-letter queue always has its row, and a crash in between leaves a row whose
// message is still in its queue. An error (the database is unreachable) keeps the
// message in its queue. The call is bounded by ctx and by 5 s.
func Record(ctx context.Context, db Execer, consumer string, dl amqp.DeadLetter) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d := dl.Delivery
	id := Identify(d.Body, d.MessageID, d.Type)
	var eventID *uuid.UUID
	if id.EventID != uuid.Nil {
		eventID = &id.EventID
	}
	props := properties{MessageID: d.MessageID, Type: d.Type, ContentType: d.ContentType, CorrelationID: d.CorrelationID,
		Exchange: d.Origin.Exchange, UserID: d.Origin.UserID}
	if !d.Timestamp.IsZero() {
		ts := d.Timestamp.UTC()
		props.Timestamp = &ts
	}
	body := d.Body
	if body == nil {
		body = []byte{} // NULL means "not recorded"
	}
	if _, err := db.Exec(ctx, insertDeadLetter, consumer, id.Key, eventID, id.EventName, dl.Reason, dl.Attempts, dl.At,
		body, props, headersJSON(d.Headers), d.RoutingKey); err != nil {
		return fmt.Errorf("record dead letter %s: %w", id.Key, err)
	}
	return nil
}

// Recorder returns Record bound to db and consumer, an amqp.ConsumerConfig.OnDeadLetter.
func Recorder(db Execer, consumer string) func(context.Context, amqp.DeadLetter) error {
	return func(ctx context.Context, dl amqp.DeadLetter) error { return Record(ctx, db, consumer, dl) }
}

// properties are the AMQP properties a dead_letter row keeps (column properties):
// those the consumer reads, and the message's origin (amqp.Origin: the exchange it
// was published to and its user_id), which the consumer checks (ContractCheck).
type properties struct {
	MessageID     string     `json:"message_id,omitempty"`
	Type          string     `json:"type,omitempty"`
	ContentType   string     `json:"content_type,omitempty"`
	CorrelationID string     `json:"correlation_id,omitempty"`
	Timestamp     *time.Time `json:"timestamp,omitempty"`
	Exchange      string     `json:"exchange,omitempty"`
	UserID        string     `json:"user_id,omitempty"`
}

// headersJSON is h as a JSON object (column headers): strings, numbers, booleans,
// nested tables and arrays as themselves, times in RFC 3339, byte arrays and other
// values as text. A nil h is an empty object.
func headersJSON(h amqp091.Table) map[string]any {
	out := make(map[string]any, len(h))
	for k, v := range h {
		out[k] = jsonValue(v)
	}
	return out
}

func jsonValue(v any) any {
	switch x := v.(type) {
	case nil, string, bool, int, int8, int16, int32, int64, uint8, uint16, uint32, float32, float64:
		return x
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case []byte:
		return string(x)
	case amqp091.Table:
		return headersJSON(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	default:
		return fmt.Sprint(x)
	}
}

// tableOf turns a headers column back into an AMQP table: whole numbers become
// int64, other numbers float64.
func tableOf(m map[string]any) amqp091.Table {
	out := make(amqp091.Table, len(m))
	for k, v := range m {
		out[k] = amqpValue(v)
	}
	return out
}

func amqpValue(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x)
		}
		return x
	case map[string]any:
		return tableOf(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = amqpValue(e)
		}
		return out
	default:
		return x
	}
}
