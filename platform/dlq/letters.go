package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// record is one dead_letter row.
type record struct {
	id         int64
	key        string
	eventID    *uuid.UUID
	eventName  *string
	reason     string
	attempts   int
	at         time.Time
	resolvedAt *time.Time
	resolution *string
	body       []byte // nil: written before the record kept the message
	props      *properties
	headers    map[string]any
	routingKey *string
}

const recordColumns = `id, message_key, event_id, event_name, reason, attempts, dead_lettered_at,
    resolved_at, resolution, body, properties, headers, routing_key`

func scanRecord(row pgx.CollectableRow) (record, error) {
	var r record
	err := row.Scan(&r.id, &r.key, &r.eventID, &r.eventName, &r.reason, &r.attempts, &r.at,
		&r.resolvedAt, &r.resolution, &r.body, &r.props, &r.headers, &r.routingKey)
	return r, err
}

// message is the message r keeps, nil when it keeps none.
func (r record) message() *Message {
	if r.body == nil {
		return nil
	}
	d := amqp091.Delivery{Body: r.body, Headers: tableOf(r.headers), DeliveryMode: amqp091.Persistent}
	if r.props != nil {
		d.MessageId, d.Type, d.ContentType, d.CorrelationId = r.props.MessageID, r.props.Type, r.props.ContentType, r.props.CorrelationID
		d.Exchange, d.UserId = r.props.Exchange, r.props.UserID // the origin, as the consumer read it
		if r.props.Timestamp != nil {
			d.Timestamp = *r.props.Timestamp
		}
	}
	if r.routingKey != nil {
		d.RoutingKey = *r.routingKey
	}
	return &Message{Identity: Identify(d.Body, d.MessageId, d.Type), Delivery: d,
		Reason: r.reason, Attempts: r.attempts, DeadLetteredAt: r.at.UTC()}
}

// identity is what r is known by, from its message when it keeps one.
func (r record) identity() Identity {
	if m := r.message(); m != nil {
		return m.Identity
	}
	id := Identity{Key: r.key}
	if r.eventID != nil {
		id.EventID = *r.eventID
	}
	if r.eventName != nil {
		id.EventName = *r.eventName
	}
	return id
}

// keyOf is the message key an ID names: an event_id in its canonical form, else the
// ID as given.
func keyOf(id string) string {
	if u, err := uuid.Parse(id); err == nil {
		return u.String()
	}
	return id
}

// openRecords returns the consumer's open rows, oldest first.
func (s *session) openRecords(ctx context.Context) ([]record, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, _ := s.pool.Query(ctx, `SELECT `+recordColumns+` FROM dead_letter
WHERE consumer = $1 AND resolved_at IS NULL ORDER BY dead_lettered_at, id`, s.cfg.Consumer)
	recs, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return nil, fmt.Errorf("dlq: read dead_letter: %w", err)
	}
	return recs, nil
}

// latestRecord returns key's newest row, open or resolved.
func (s *session) latestRecord(ctx context.Context, key string) (record, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, _ := s.pool.Query(ctx, `SELECT `+recordColumns+` FROM dead_letter
WHERE consumer = $1 AND message_key = $2 ORDER BY resolved_at IS NULL DESC, dead_lettered_at DESC, id DESC LIMIT 1`,
		s.cfg.Consumer, key)
	r, err := pgx.CollectExactlyOneRow(rows, scanRecord)
	if errors.Is(err, pgx.ErrNoRows) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, fmt.Errorf("dlq: read dead_letter of %s: %w", key, err)
	}
	return r, true, nil
}

// lockWait bounds how long lock waits for another run that holds a key's rows.
const lockWait = 30 * time.Second

// errTaken: another run has held a key's rows for longer than lockWait.
var errTaken = errors.New("another dlq run holds it")

// lock begins a transaction and locks key's open rows, newest first; tx is nil when
// there are none. When another run holds them it reports waited, waits for it (at
// most lockWait, then errTaken) and sees the rows as that run left them: resolved
// ones are no longer open. The caller ends tx.
func (s *session) lock(ctx context.Context, key string) (tx pgx.Tx, recs []record, waited bool, err error) {
	tx, err = s.pool.Begin(ctx)
	if err != nil {
		return nil, nil, false, fmt.Errorf("dlq: begin: %w", err)
	}
	const q = `SELECT ` + recordColumns + ` FROM dead_letter
WHERE consumer = $1 AND message_key = $2 AND resolved_at IS NULL
ORDER BY dead_lettered_at DESC, id DESC FOR UPDATE`
	rows, _ := tx.Query(ctx, q+` NOWAIT`, s.cfg.Consumer, key)
	recs, err = pgx.CollectRows(rows, scanRecord)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		waited = true
		_ = tx.Rollback(ctx)
		if tx, err = s.pool.Begin(ctx); err != nil {
			return nil, nil, true, fmt.Errorf("dlq: begin: %w", err)
		}
		if _, err = tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", lockWait.Milliseconds())); err == nil {
			rows, _ = tx.Query(ctx, q, s.cfg.Consumer, key)
			recs, err = pgx.CollectRows(rows, scanRecord)
		}
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			_ = tx.Rollback(ctx)
			return nil, nil, true, errTaken
		}
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, nil, waited, fmt.Errorf("dlq: lock dead_letter of %s: %w", key, err)
	}
	if len(recs) == 0 {
		_ = tx.Rollback(ctx)
		return nil, nil, waited, nil
	}
	return tx, recs, waited, nil
}

// resolve marks recs resolved in tx and commits it.
func (s *session) resolve(ctx context.Context, tx pgx.Tx, recs []record, resolution string) error {
	ids := make([]int64, len(recs))
	for i, r := range recs {
		ids[i] = r.id
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := tx.Exec(ctx, `UPDATE dead_letter SET resolved_at = now(), resolution = $2 WHERE id = ANY($1)`, ids, resolution); err != nil {
		_ = tx.Rollback(ctx)
		return fmt.Errorf("dlq: mark %s %s: %w", recs[0].key, resolution, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("dlq: mark %s %s: commit: %w", recs[0].key, resolution, err)
	}
	return nil
}

// recordedMessage is the message of the newest of recs that keeps one, else nil.
func recordedMessage(recs []record) *Message {
	for _, r := range recs {
		if m := r.message(); m != nil {
			return m
		}
	}
	return nil
}

// resolvedNote says how and when r was resolved.
func resolvedNote(r record) string {
	res := "resolved"
	if r.resolution != nil {
		res = *r.resolution
	}
	at := "-"
	if r.resolvedAt != nil {
		at = r.resolvedAt.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("already %s at %s", res, at)
}

// headersOf is a JSON-friendly view of a message's headers for show.
func headersOf(h amqp091.Table) json.RawMessage {
	b, err := json.Marshal(headersJSON(h))
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

// plural is n and word, with an s unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, strings.TrimSuffix(word, "s"))
}
