package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/inbox/msgkey"
	"example.com/shop/platform/pg"
)

// Mode says what Handle does with a message whose key is already in
// processed_event for the consumer. In every mode fn is not called again.
type Mode int

const (
	// Skip returns an Outcome with Duplicate set and no error (the default).
	Skip Mode = iota
	// Fail returns an error wrapping ErrDuplicate.
	Fail
	// ReturnStored returns an Outcome with Duplicate set and, in Result, the JSON of
	// the result fn returned the first time: for webhooks and requests whose retries
	// must get the first answer.
	ReturnStored
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Skip:
		return "skip"
	case Fail:
		return "fail"
	case ReturnStored:
		return "return-stored"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Errors of Handle. Permanent reports which of them no retry can fix.
var (
	// ErrNoKey means the message has no key (Message.Key is empty, or a msgkey
	// function found none). Nothing was written; dead-letter the message.
	ErrNoKey = msgkey.ErrNoKey
	// ErrDuplicate is returned, wrapped, in mode Fail for a message already
	// processed. Nothing was written.
	ErrDuplicate = errors.New("message already processed")
	// ErrConflict means the key was processed before with another content: a
	// different message reusing a key, not a duplicate. Nothing was written; the
	// error is a *ConflictError.
	ErrConflict = errors.New("message key already used with another content")
)

// Permanent reports whether err means the message can never be processed, so a
// consumer must dead-letter it at once instead of retrying (docs/architecture.md
// rule 3): ErrNoKey, ErrConflict, ErrNoEventID, ErrNoHandler or anything wrapping
// ErrPermanent. Database errors, handler errors and ErrDuplicate are not permanent.
func Permanent(err error) bool {
	return errors.Is(err, ErrPermanent) || errors.Is(err, ErrNoKey) || errors.Is(err, ErrConflict) ||
		errors.Is(err, ErrNoEventID) || errors.Is(err, ErrNoHandler)
}

// ConflictError is the error of a message whose key was processed before with
// another content. It wraps ErrConflict.
type ConflictError struct {
	Consumer string
	Key      string
	Stored   []byte // SHA-256 of the content processed first (32 bytes)
	Got      []byte // SHA-256 of this message's content (32 bytes)
}

func (e *ConflictError) Error() string {
	// Handle wraps it with the consumer and the key.
	return fmt.Sprintf("%v (stored sha256 %x, this message %x)", ErrConflict, e.Stored, e.Got)
}

// Unwrap returns ErrConflict.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// Message is what Handle deduplicates.
type Message struct {
	// Key identifies the message for the consumer (see package msgkey); keys longer
	// than msgkey.MaxLen bytes are stored as their SHA-256. Empty is ErrNoKey.
	Key string
	// Content is the message body, or a canonical form of the request, whose
	// SHA-256 is stored with the key. A later message with the same key and another
	// content is a conflict. Nil turns the check off for this message (the key is
	// stored without a hash).
	Content []byte
}

// Outcome is what Handle did with a message.
type Outcome struct {
	// Duplicate is true when the key was already there and fn was not called.
	Duplicate bool
	// Result is the JSON of fn's result, in mode ReturnStored only: the result of
	// this call when it processed the message, the stored one of the first call for
	// a duplicate (nil when the key was stored without a result). A stored result
	// comes back as PostgreSQL's jsonb prints it: the same value, not the same bytes
	// (keys reordered, spaces added); store bytes that must come back unchanged as a
	// JSON string.
	Result json.RawMessage
}

// Func applies a message's effect inside tx, the transaction that holds its key.
// It must write through tx only and never commit or roll it back; returning an
// error rolls its writes back with the key. The result is stored as JSON in mode
// ReturnStored and ignored otherwise. Calling the network (a broker, another
// service) inside tx holds the key's lock for as long: pass the key on as the
// remote API's idempotency key instead.
type Func func(ctx context.Context, tx pgx.Tx) (result any, err error)

// DB is where Handle runs: a *pgxpool.Pool or *pgx.Conn, on which it opens a READ
// COMMITTED transaction, or an open pgx.Tx, which it joins through a savepoint.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Config configures a Consumer.
type Config struct {
	// Name is the consumer, the first half of every key it writes (required).
	// Two consumers of one message process it once each.
	Name string
	// Mode is what a duplicate gets (default Skip).
	Mode Mode
	// Logger receives conflicts (Warn); nil discards.
	Logger *slog.Logger
	// Registerer gets the consumer's counters (see NewConsumer); nil registers
	// nothing, the counters then count unexported.
	Registerer prometheus.Registerer
}

// Consumer deduplicates the messages of one consumer in processed_event. It is safe
// for concurrent use; concurrent calls with one key serialise on the key.
type Consumer struct {
	name    string
	mode    Mode
	logger  *slog.Logger
	metrics *metrics
}

// NewConsumer returns the Consumer of cfg. Its counters, per consumer label:
//
//	inbox_processed_total{consumer}          messages whose fn committed
//	inbox_duplicates_total{consumer}         messages whose key was there (fn not called)
//	inbox_conflicts_total{consumer}          keys reused with another content
//	inbox_failures_total{consumer,reason}    "error": fn or the database failed (retry);
//	                                         "invalid": no key or unprocessable (dead-letter)
//	inbox_handler_duration_seconds{consumer} time of the whole transaction, in seconds
//
// Several consumers may share one registry. It panics on an empty Name, a
// programming error.
func NewConsumer(cfg Config) *Consumer {
	if cfg.Name == "" {
		panic("inbox: NewConsumer without a Name")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Consumer{
		name:    cfg.Name,
		mode:    cfg.Mode,
		logger:  logger.With("consumer", cfg.Name),
		metrics: newMetrics(cfg.Registerer, cfg.Name, logger),
	}
}

// Handle processes the message with key once for consumer, in mode Skip, without
// content check and without counters: the whole library in one call. See
// Consumer.Handle.
func Handle(ctx context.Context, db DB, consumer, key string, fn Func) (Outcome, error) {
	return (&Consumer{name: consumer, mode: Skip, logger: slog.New(slog.DiscardHandler), metrics: newMetrics(nil, consumer, nil)}).
		Handle(ctx, db, Message{Key: key}, fn)
}

// insertKey is the whole deduplication: the insert adds the key (the message is
// new) or does nothing (it was processed). A concurrent transaction holding the same
// key makes it wait until that one commits (nothing inserted) or rolls back (this
// one inserts). It never raises a unique violation, which would abort the
// transaction (SQLSTATE 25P02).
const insertKey = `INSERT INTO processed_event (consumer, message_key, payload_sha256, processed_at)
VALUES ($1, $2, $3, now())
ON CONFLICT DO NOTHING`

// selectKey reads what was stored with a key found to exist. Its own statement, so
// READ COMMITTED sees a row committed while insertKey waited.
const selectKey = `SELECT payload_sha256, result FROM processed_event WHERE consumer = $1 AND message_key = $2`

// storeResult records fn's result with the key (mode ReturnStored).
const storeResult = `UPDATE processed_event SET result = $3 WHERE consumer = $1 AND message_key = $2`

// Handle processes m once for the consumer (docs/architecture.md, rule 3, which
// Inbox runs for an event envelope in its processOne, on one screen). In one
// transaction on db it inserts the key (consumer, m.Key) with the SHA-256 of
// m.Content, then calls fn, then commits. When the key is already there, fn is not
// called and, depending on the mode, Handle returns Duplicate (Skip, ReturnStored
// with the stored Result) or ErrDuplicate (Fail). A key stored with another content
// hash is a *ConflictError instead, counted and logged with both hashes; a key
// stored without a hash (content unknown, for example written before the hash
// existed) is a duplicate.
//
// A concurrent call with the same key waits on it and then sees the first call's
// outcome: a duplicate after its commit, a fresh message after its rollback.
//
// Errors: ErrNoKey (nothing touched), *ConflictError, ErrDuplicate (mode Fail),
// fn's error, or a database error, each wrapped with the consumer and the key. Any
// error rolls back the key with fn's writes: in a transaction of its own, or back
// to the savepoint in a joined one, which stays usable.
func (c *Consumer) Handle(ctx context.Context, db DB, m Message, fn Func) (Outcome, error) {
	var sum []byte
	if m.Content != nil {
		s := sha256.Sum256(m.Content)
		sum = s[:]
	}
	return handle(ctx, c, PostgresStore{}, db, m.Key, sum, fn)
}

// PostgresStore is the Store of Consumer: processed_event on PostgreSQL through
// pgx. A duplicate is an insert that inserted nothing (ON CONFLICT DO NOTHING),
// which never aborts the transaction; NewStoreConsumer(PostgresStore{}, cfg) is
// the generic form of NewConsumer(cfg).
type PostgresStore struct{}

// InTx implements Store: a READ COMMITTED transaction on a pool or connection, a
// savepoint in an open pgx.Tx.
func (PostgresStore) InTx(ctx context.Context, db DB, fn func(tx pgx.Tx) error) error {
	return inTx(ctx, db, fn)
}

// InsertKey implements Store.
func (PostgresStore) InsertKey(ctx context.Context, tx pgx.Tx, consumer, key string, sum []byte) (bool, error) {
	tag, err := tx.Exec(ctx, insertKey, consumer, key, sum)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// ReadKey implements Store; a purged key is pgx.ErrNoRows.
func (PostgresStore) ReadKey(ctx context.Context, tx pgx.Tx, consumer, key string) (sum, result []byte, err error) {
	err = tx.QueryRow(ctx, selectKey, consumer, key).Scan(&sum, &result)
	return sum, result, err
}

// StoreResult implements Store.
func (PostgresStore) StoreResult(ctx context.Context, tx pgx.Tx, consumer, key string, result []byte) error {
	_, err := tx.Exec(ctx, storeResult, consumer, key, result)
	return err
}

// conflict logs a reused key and returns its error.
func (c *Consumer) conflict(ctx context.Context, key string, stored, got []byte) error {
	c.logger.LogAttrs(ctx, slog.LevelWarn, "message key reused with another content: not applied",
		slog.String("message_key", key), slog.String("stored_sha256", hex.EncodeToString(stored)),
		slog.String("payload_sha256", hex.EncodeToString(got)))
	return &ConflictError{Consumer: c.name, Key: key, Stored: stored, Got: got}
}

// count adds the outcome of one Handle to the counters.
func (c *Consumer) count(out Outcome, err error) {
	switch {
	case errors.Is(err, ErrConflict):
		c.metrics.conflicts.Inc()
	case out.Duplicate:
		c.metrics.duplicates.Inc()
	case err != nil:
		c.metrics.failed.Inc()
	default:
		c.metrics.processed.Inc()
	}
}

// inTx runs fn in a transaction on db: a savepoint when db is an open pgx.Tx, a READ
// COMMITTED transaction on a pool or connection. fn's error rolls it back.
func inTx(ctx context.Context, db DB, fn func(tx pgx.Tx) error) error {
	if b, ok := db.(pg.TxBeginner); ok {
		return pg.WithTx(ctx, b, fn)
	}
	tx, err := db.Begin(ctx) // a savepoint in an open transaction
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		if rbErr := tx.Rollback(ctx); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
			return errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
		}
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
