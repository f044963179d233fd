// Package store reads, and never writes, the tables the auditor checks: each producer
// database's outbox, the order database's orders, and each consumer database's
// processed_event, dead_letter, order_status, reservation and shipment. Every query is
// bounded: it reads by primary key, by a range of the outbox's UUID v7 primary key, or
// with a LIMIT, so that the auditor's load does not grow with the size of the tables.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
)

// ErrNotFound is returned when an order or event does not exist.
var ErrNotFound = errors.New("not found")

// ErrUnknownConsumer is returned for a consumer name the store has no database for.
var ErrUnknownConsumer = errors.New("unknown consumer")

// ErrUnknownProducer is returned for a producer name the store has no database for.
var ErrUnknownProducer = errors.New("unknown producer")

// Store reads one database per producer and one per consumer (a service that is both
// shares one pool). It is safe for concurrent use; the pools are owned by the caller.
type Store struct {
	producers map[string]*pgxpool.Pool
	consumers map[string]*pgxpool.Pool
}

// New returns a Store on the producers' databases, keyed by producer name (one per
// contracts.Producers), and the consumers' databases, keyed by consumer name (one per
// contracts.Consumers). Any other name is an ErrUnknownProducer or ErrUnknownConsumer.
// The orders table is read in the database of the producer of contracts.EventOrderPlaced.
func New(producers, consumers map[string]*pgxpool.Pool) *Store {
	return &Store{producers: producers, consumers: consumers}
}

func (s *Store) consumer(name string) (*pgxpool.Pool, error) {
	p, ok := s.consumers[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownConsumer, name)
	}
	return p, nil
}

func (s *Store) producer(name string) (*pgxpool.Pool, error) {
	p, ok := s.producers[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownProducer, name)
	}
	return p, nil
}

// orders returns the database that holds the orders table: the one of the producer of
// the order's events.
func (s *Store) orders() (*pgxpool.Pool, error) {
	p, _ := contracts.ProducerOf(contracts.EventOrderPlaced)
	return s.producer(p.Name)
}

// OutboxRow is one outbox row of a producer with the order fields of its payload: the
// order id, and the order version (an answer's order_version: the version it answers).
type OutboxRow struct {
	Producer     string
	ID           uuid.UUID
	EventName    string
	OrderID      uuid.UUID
	OrderVersion int
	OccurredAt   time.Time
	PublishedAt  *time.Time // nil while unpublished
	Attempts     int
	LastError    string
}

const outboxColumns = `id, event_name, COALESCE((envelope->'payload'->>'order_id')::uuid, '00000000-0000-0000-0000-000000000000'),
	COALESCE((envelope->'payload'->>'version')::int, (envelope->'payload'->>'order_version')::int, 0), occurred_at, published_at, attempts, COALESCE(last_error, '')`

func scanOutbox(producer string, rows pgx.Rows) ([]OutboxRow, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxRow, error) {
		o := OutboxRow{Producer: producer}
		err := r.Scan(&o.ID, &o.EventName, &o.OrderID, &o.OrderVersion, &o.OccurredAt, &o.PublishedAt, &o.Attempts, &o.LastError)
		return o, err
	})
}

// OutboxPage returns at most limit rows of producer's outbox with after < id <= until,
// in id order. Event ids are UUID v7, so an id range is a time range served by the
// primary key.
func (s *Store) OutboxPage(ctx context.Context, producer string, after, until uuid.UUID, limit int) ([]OutboxRow, error) {
	db, err := s.producer(producer)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT `+outboxColumns+` FROM outbox
WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3`, after, until, limit)
	if err != nil {
		return nil, fmt.Errorf("read outbox page: %w", err)
	}
	out, err := scanOutbox(producer, rows)
	if err != nil {
		return nil, fmt.Errorf("read outbox page: %w", err)
	}
	return out, nil
}

// OutboxByIDs returns the rows of producer's outbox with the given ids that exist, in
// id order.
func (s *Store) OutboxByIDs(ctx context.Context, producer string, ids []uuid.UUID) ([]OutboxRow, error) {
	db, err := s.producer(producer)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT `+outboxColumns+` FROM outbox WHERE id = ANY($1) ORDER BY id`, ids)
	if err != nil {
		return nil, fmt.Errorf("read outbox rows: %w", err)
	}
	out, err := scanOutbox(producer, rows)
	if err != nil {
		return nil, fmt.Errorf("read outbox rows: %w", err)
	}
	return out, nil
}

// OutboxOfOrders returns the events of the given orders among the rows of producer's
// outbox with from <= id <= until, in id order, at most limit of them. The caller
// bounds the id range by the orders' creation and last change, so the scan stays short.
func (s *Store) OutboxOfOrders(ctx context.Context, producer string, orderIDs []uuid.UUID, from, until uuid.UUID, limit int) ([]OutboxRow, error) {
	db, err := s.producer(producer)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(orderIDs))
	for i, id := range orderIDs {
		ids[i] = id.String()
	}
	rows, err := db.Query(ctx, `SELECT `+outboxColumns+` FROM outbox
WHERE id >= $1 AND id <= $2 AND envelope->'payload'->>'order_id' = ANY($3::text[])
ORDER BY id LIMIT $4`, from, until, ids, limit)
	if err != nil {
		return nil, fmt.Errorf("read the orders' events: %w", err)
	}
	out, err := scanOutbox(producer, rows)
	if err != nil {
		return nil, fmt.Errorf("read the orders' events: %w", err)
	}
	return out, nil
}

// OrderWindow is an order and the id range of a producer's outbox where its events
// are searched: From <= id <= Until (UUID v7 ids, so a time range).
type OrderWindow struct {
	OrderID     uuid.UUID
	From, Until uuid.UUID
}

// OutboxNear returns the events of each order of windows among the rows of producer's
// outbox in that order's id range, at most limit in all. Each range is a scan of the
// primary key of its own (the LIMIT inside keeps the planner from joining the whole
// table instead), so the cost grows with the number of orders and the width of their
// ranges, not with the outbox: 1 000 ranges of 2 s in a 1 000 000-row outbox written
// at 200 events/s took 125 ms.
func (s *Store) OutboxNear(ctx context.Context, producer string, windows []OrderWindow, limit int) ([]OutboxRow, error) {
	db, err := s.producer(producer)
	if err != nil {
		return nil, err
	}
	ids, from, until := make([]string, len(windows)), make([]uuid.UUID, len(windows)), make([]uuid.UUID, len(windows))
	for i, w := range windows {
		ids[i], from[i], until[i] = w.OrderID.String(), w.From, w.Until
	}
	rows, err := db.Query(ctx, `SELECT e.* FROM unnest($1::text[], $2::uuid[], $3::uuid[]) AS w(order_id, lo, hi)
CROSS JOIN LATERAL (SELECT `+outboxColumns+` FROM outbox
	WHERE id >= w.lo AND id <= w.hi AND envelope->'payload'->>'order_id' = w.order_id ORDER BY id LIMIT $4) AS e
LIMIT $4`, ids, from, until, limit)
	if err != nil {
		return nil, fmt.Errorf("read the orders' events: %w", err)
	}
	out, err := scanOutbox(producer, rows)
	if err != nil {
		return nil, fmt.Errorf("read the orders' events: %w", err)
	}
	return out, nil
}

// FirstAfter returns the occurred_at of the first row of producer's outbox with
// id > after, and false when there is none.
func (s *Store) FirstAfter(ctx context.Context, producer string, after uuid.UUID) (time.Time, bool, error) {
	db, err := s.producer(producer)
	if err != nil {
		return time.Time{}, false, err
	}
	var at time.Time
	err = db.QueryRow(ctx, `SELECT occurred_at FROM outbox WHERE id > $1 ORDER BY id LIMIT 1`, after).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read the first unaudited event: %w", err)
	}
	return at, true, nil
}

// PublishedAfter counts the published rows of producer's outbox with id > after,
// reading at most limit rows; a result of limit means "limit or more".
func (s *Store) PublishedAfter(ctx context.Context, producer string, after uuid.UUID, limit int) (int, error) {
	db, err := s.producer(producer)
	if err != nil {
		return 0, err
	}
	var n int
	err = db.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM outbox
WHERE id > $1 AND published_at IS NOT NULL LIMIT $2) AS head`, after, limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count published events: %w", err)
	}
	return n, nil
}

// Order is an order's current row.
type Order struct {
	ID        uuid.UUID
	Status    string
	Version   int
	CreatedAt time.Time
	UpdatedAt time.Time
}

const orderColumns = `id, status, version, created_at, updated_at`

func scanOrder(r pgx.CollectableRow) (Order, error) {
	var o Order
	err := r.Scan(&o.ID, &o.Status, &o.Version, &o.CreatedAt, &o.UpdatedAt)
	return o, err
}

// Order returns the order with id, or an error wrapping ErrNotFound.
func (s *Store) Order(ctx context.Context, id uuid.UUID) (Order, error) {
	db, err := s.orders()
	if err != nil {
		return Order{}, err
	}
	rows, err := db.Query(ctx, `SELECT `+orderColumns+` FROM orders WHERE id = $1`, id)
	if err != nil {
		return Order{}, fmt.Errorf("read order %s: %w", id, err)
	}
	o, err := pgx.CollectExactlyOneRow(rows, scanOrder)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, fmt.Errorf("order %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Order{}, fmt.Errorf("read order %s: %w", id, err)
	}
	return o, nil
}

// LatestOrders returns the n most recently created orders, newest first. Order ids
// are UUID v7, so the primary key serves the order.
func (s *Store) LatestOrders(ctx context.Context, n int) ([]Order, error) {
	db, err := s.orders()
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT `+orderColumns+` FROM orders ORDER BY id DESC LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("read latest orders: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanOrder)
	if err != nil {
		return nil, fmt.Errorf("read latest orders: %w", err)
	}
	return out, nil
}

// Orders returns the orders among ids that exist, by primary key.
func (s *Store) Orders(ctx context.Context, ids []uuid.UUID) ([]Order, error) {
	db, err := s.orders()
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT `+orderColumns+` FROM orders WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read orders: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanOrder)
	if err != nil {
		return nil, fmt.Errorf("read orders: %w", err)
	}
	return out, nil
}

// WaitingOrders returns the orders in status placed, waiting for stock's answer
// (docs/architecture.md, rule 7), whose last change is at or before `before`, oldest
// change first, at most limit. The partial index orders_placed_idx serves it: its size
// is the number of placed orders, not of all orders.
func (s *Store) WaitingOrders(ctx context.Context, before time.Time, limit int) ([]Order, error) {
	db, err := s.orders()
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT `+orderColumns+` FROM orders
WHERE status = 'placed' AND updated_at <= $1 ORDER BY updated_at, id LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("read waiting orders: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanOrder)
	if err != nil {
		return nil, fmt.Errorf("read waiting orders: %w", err)
	}
	return out, nil
}

// processedQuery finds a consumer's processed_event keys among the given event ids,
// each given as its canonical lowercase text; a key `dlq drop` wrote (outcome
// 'dropped') is no processing: its dead letter says what happened.
const processedQuery = `SELECT message_key, processed_at FROM processed_event
WHERE consumer = $1 AND message_key = ANY($2::text[]) AND outcome IS NULL`

// Processed returns, for the events among ids that consumer has processed, when it
// did (its processed_event key).
func (s *Store) Processed(ctx context.Context, consumer string, ids []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	p, err := s.consumer(consumer)
	if err != nil {
		return nil, err
	}
	rows, err := p.Query(ctx, processedQuery, consumer, keys(ids))
	if err != nil {
		return nil, fmt.Errorf("read %s processed_event: %w", consumer, err)
	}
	out := make(map[uuid.UUID]time.Time, len(ids))
	var key string
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&key, &at}, func() error {
		id, err := uuid.Parse(key)
		if err == nil {
			out[id] = at
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s processed_event: %w", consumer, err)
	}
	return out, nil
}

// keys returns the message keys of event ids: their canonical lowercase text.
func keys(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// DeadLetter is what a consumer recorded about an event it dead-lettered.
type DeadLetter struct {
	Reason         string
	Attempts       int
	DeadLetteredAt time.Time
	ResolvedAt     *time.Time // nil while it awaits a decision (dlq replay or drop)
	Resolution     string     // "replayed" or "dropped" once resolved
}

// DeadLetters returns the latest dead_letter record of each event among ids that
// consumer dead-lettered. A consumer database without a dead_letter table has none.
func (s *Store) DeadLetters(ctx context.Context, consumer string, ids []uuid.UUID) (map[uuid.UUID]DeadLetter, error) {
	p, err := s.consumer(consumer)
	if err != nil {
		return nil, err
	}
	rows, err := p.Query(ctx, `SELECT DISTINCT ON (message_key) message_key, COALESCE(reason, ''), attempts,
	dead_lettered_at, resolved_at, COALESCE(resolution, '')
FROM dead_letter WHERE consumer = $1 AND message_key = ANY($2::text[])
ORDER BY message_key, dead_lettered_at DESC`, consumer, keys(ids))
	if err != nil {
		if undefinedTable(err) {
			return map[uuid.UUID]DeadLetter{}, nil
		}
		return nil, fmt.Errorf("read %s dead_letter: %w", consumer, err)
	}
	out := map[uuid.UUID]DeadLetter{}
	var key string
	var d DeadLetter
	_, err = pgx.ForEachRow(rows, []any{&key, &d.Reason, &d.Attempts, &d.DeadLetteredAt, &d.ResolvedAt, &d.Resolution}, func() error {
		if id, err := uuid.Parse(key); err == nil {
			out[id] = d
		}
		return nil
	})
	if err != nil {
		if undefinedTable(err) {
			return map[uuid.UUID]DeadLetter{}, nil
		}
		return nil, fmt.Errorf("read %s dead_letter: %w", consumer, err)
	}
	return out, nil
}

// UnresolvedDeadLetters counts consumer's open dead letters: the message keys with a
// dead_letter row not yet replayed or dropped (a key dead-lettered twice before a
// decision is one dead letter). It returns false when the consumer's database has no
// dead_letter table.
func (s *Store) UnresolvedDeadLetters(ctx context.Context, consumer string) (int, bool, error) {
	p, err := s.consumer(consumer)
	if err != nil {
		return 0, false, err
	}
	var n int
	err = p.QueryRow(ctx, `SELECT count(DISTINCT message_key) FROM dead_letter WHERE consumer = $1 AND resolved_at IS NULL`, consumer).Scan(&n)
	if undefinedTable(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("count %s dead letters: %w", consumer, err)
	}
	return n, true, nil
}

// OpenDeadLetter is one open dead letter of a consumer: a message key with a
// dead_letter row not yet replayed or dropped.
type OpenDeadLetter struct {
	MessageKey     string
	EventName      string // "" when the message had none
	Reason         string
	Attempts       int
	DeadLetteredAt time.Time
}

// OpenDeadLetters returns consumer's open dead letters, oldest first, one per message
// key (its oldest open row), reading at most limit rows through the partial index
// dead_letter_open_idx. It returns false when the consumer's database has no
// dead_letter table.
func (s *Store) OpenDeadLetters(ctx context.Context, consumer string, limit int) ([]OpenDeadLetter, bool, error) {
	p, err := s.consumer(consumer)
	if err != nil {
		return nil, false, err
	}
	rows, err := p.Query(ctx, `SELECT message_key, COALESCE(event_name, ''), COALESCE(reason, ''), attempts, dead_lettered_at
FROM dead_letter WHERE consumer = $1 AND resolved_at IS NULL ORDER BY dead_lettered_at LIMIT $2`, consumer, limit)
	if err == nil {
		var all []OpenDeadLetter
		all, err = pgx.CollectRows(rows, pgx.RowToStructByPos[OpenDeadLetter])
		if err == nil {
			seen := map[string]bool{}
			out := make([]OpenDeadLetter, 0, len(all))
			for _, d := range all {
				if !seen[d.MessageKey] {
					seen[d.MessageKey] = true
					out = append(out, d)
				}
			}
			return out, true, nil
		}
	}
	if undefinedTable(err) {
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("read %s open dead letters: %w", consumer, err)
}

func undefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// StateCopy is what a consumer holds about one order: its versioned order_status
// row, and the consumer's effect (reservations held, or the shipment's status).
type StateCopy struct {
	Found   bool
	Status  string
	Version int
	Effect  string // e.g. "2 reservations" or "shipment ready"
}

// StateCopies returns consumer's order_status row and effect for each of orderIDs
// it knows; none for a consumer whose database keeps no order_status table.
func (s *Store) StateCopies(ctx context.Context, consumer string, orderIDs []uuid.UUID) (map[uuid.UUID]StateCopy, error) {
	p, err := s.consumer(consumer)
	if err != nil {
		return nil, err
	}
	var effect string
	switch consumer {
	case "stock":
		effect = `(SELECT count(*) || ' reservations' FROM reservation r WHERE r.order_id = s.order_id AND r.status = 'held')`
	case "shipping":
		effect = `(SELECT 'shipment ' || sh.status FROM shipment sh WHERE sh.order_id = s.order_id)`
	default:
		effect = `''`
	}
	rows, err := p.Query(ctx, `SELECT s.order_id, s.status, s.version, COALESCE(`+effect+`, '')
FROM order_status s WHERE s.order_id = ANY($1)`, orderIDs)
	if undefinedTable(err) {
		return map[uuid.UUID]StateCopy{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s order_status: %w", consumer, err)
	}
	out := make(map[uuid.UUID]StateCopy, len(orderIDs))
	var id uuid.UUID
	c := StateCopy{Found: true}
	_, err = pgx.ForEachRow(rows, []any{&id, &c.Status, &c.Version, &c.Effect}, func() error {
		out[id] = c
		return nil
	})
	if undefinedTable(err) {
		return map[uuid.UUID]StateCopy{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s order_status: %w", consumer, err)
	}
	return out, nil
}

// Ping checks every database.
func (s *Store) Ping(ctx context.Context) error {
	var errs []error
	for _, pools := range []map[string]*pgxpool.Pool{s.producers, s.consumers} {
		for name, p := range pools {
			if err := p.Ping(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}
