// Package dlq handles a consuming service's dead letters: it records each one in the
// service's dead_letter table as the consumer dead-letters it, exports how many are
// open, and runs the `dlq list|show|replay|drop` subcommands that let an operator read
// why a message failed and move it back to its queue (docs/architecture.md, step 5 of
// the flow; docs/operations.md, "Dead letters").
//
// The table it writes is owned by each service's migrations:
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
//	    resolution       text        NULL CHECK (resolution IN ('replayed', 'dropped'))
//	);
package dlq

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

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

const insertDeadLetter = `INSERT INTO dead_letter
    (consumer, message_key, event_id, event_name, reason, attempts, dead_lettered_at)
VALUES ($1, $2, $3, NULLIF($4, ''), $5, $6, $7)`

// Record writes one dead_letter row for dl as consumer. It is the
// amqp.ConsumerConfig.OnDeadLetter of a consuming service, so the row exists before
// the dead-lettered copy is published; an error (the database is unreachable) keeps
// the message in its queue. The call is bounded by ctx and by 5 s.
func Record(ctx context.Context, db Execer, consumer string, dl amqp.DeadLetter) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	id := Identify(dl.Delivery.Body, dl.Delivery.MessageID, dl.Delivery.Type)
	var eventID *uuid.UUID
	if id.EventID != uuid.Nil {
		eventID = &id.EventID
	}
	if _, err := db.Exec(ctx, insertDeadLetter, consumer, id.Key, eventID, id.EventName, dl.Reason, dl.Attempts, dl.At); err != nil {
		return fmt.Errorf("record dead letter %s: %w", id.Key, err)
	}
	return nil
}

// Recorder returns Record bound to db and consumer, an amqp.ConsumerConfig.OnDeadLetter.
func Recorder(db Execer, consumer string) func(context.Context, amqp.DeadLetter) error {
	return func(ctx context.Context, dl amqp.DeadLetter) error { return Record(ctx, db, consumer, dl) }
}
