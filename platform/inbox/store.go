package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/inbox/msgkey"
)

// Store is the database side of a StoreConsumer: the four statements of the
// inbox on one database engine. DB is what a caller hands to Handle (a pool, a
// connection or an open transaction), Tx the transaction type the handler writes
// through. PostgresStore is the store of this package (pgx); the module
// integrations/mysqlinbox holds the MySQL/MariaDB one (database/sql). A Store is
// stateless and safe for concurrent use.
type Store[DB, Tx any] interface {
	// InTx runs fn in a READ COMMITTED transaction on db, or joins db when it is an
	// open transaction (through a savepoint, so that fn's error rolls back fn's
	// writes and leaves the caller's transaction usable), commits when fn returns
	// nil and rolls back otherwise. Errors are fn's or the database's, wrapped.
	InTx(ctx context.Context, db DB, fn func(tx Tx) error) error
	// InsertKey inserts (consumer, key, sum, now) into processed_event and
	// reports whether the row is new. A key held by a concurrent transaction makes
	// it wait for that one: false after its commit, true after its rollback. A key
	// already there must be reported as false without an error, recognised by the
	// database's own duplicate-key signal, and must leave tx usable.
	InsertKey(ctx context.Context, tx Tx, consumer, key string, sum []byte) (inserted bool, err error)
	// ReadKey returns the content hash and the stored result of a key that
	// InsertKey found: both nil when they were stored as NULL. It reads the
	// committed row whatever the transaction's snapshot.
	ReadKey(ctx context.Context, tx Tx, consumer, key string) (sum, result []byte, err error)
	// StoreResult stores result (JSON) with the key InsertKey inserted in tx.
	StoreResult(ctx context.Context, tx Tx, consumer, key string, result []byte) error
}

// TxFunc applies a message's effect inside tx, the transaction that holds its
// key, as Func does for PostgreSQL: writes through tx only, never a commit or a
// rollback of it; an error rolls back its writes with the key.
type TxFunc[Tx any] func(ctx context.Context, tx Tx) (result any, err error)

// StoreConsumer is a Consumer on any Store: the same algorithm, modes, content
// check and counters (see Consumer.Handle and NewConsumer), with the handler
// receiving the store's transaction type. It is safe for concurrent use;
// concurrent calls with one key serialise on the key in the database.
type StoreConsumer[DB, Tx any] struct {
	c     *Consumer
	store Store[DB, Tx]
}

// NewStoreConsumer returns the consumer of cfg on store; its counters are those
// NewConsumer lists. It panics on an empty Name, a programming error.
func NewStoreConsumer[DB, Tx any](store Store[DB, Tx], cfg Config) *StoreConsumer[DB, Tx] {
	return &StoreConsumer[DB, Tx]{c: NewConsumer(cfg), store: store}
}

// Name returns the consumer's name.
func (s *StoreConsumer[DB, Tx]) Name() string { return s.c.name }

// Handle processes m once for the consumer (docs/architecture.md, rule 3): the
// key first, then fn, then one commit, all in one transaction on db. Outcomes,
// errors and the wait of a concurrent duplicate are those of Consumer.Handle.
func (s *StoreConsumer[DB, Tx]) Handle(ctx context.Context, db DB, m Message, fn TxFunc[Tx]) (Outcome, error) {
	var sum []byte
	if m.Content != nil {
		s := sha256.Sum256(m.Content)
		sum = s[:]
	}
	return handle(ctx, s.c, s.store, db, m.Key, sum, fn)
}

// handle is the inbox's algorithm on store for a key with content hash sum (nil:
// no content check): normalise the key, then in one transaction insert it, run fn
// (a new key) or read the stored row (a duplicate), and count the outcome.
func handle[DB, Tx any, F ~func(context.Context, Tx) (any, error)](ctx context.Context, c *Consumer, store Store[DB, Tx], db DB, key string, sum []byte, fn F) (Outcome, error) {
	key, err := msgkey.Normalize(key)
	if err != nil {
		c.metrics.invalid.Inc()
		return Outcome{}, fmt.Errorf("inbox %s: %w", c.name, err)
	}
	var out Outcome
	timer := prometheus.NewTimer(c.metrics.duration)
	err = store.InTx(ctx, db, func(tx Tx) error {
		var err error
		out, err = handleTx(ctx, c, store, tx, key, sum, fn)
		return err
	})
	timer.ObserveDuration()
	c.count(out, err)
	if err != nil {
		return out, fmt.Errorf("inbox %s: key %q: %w", c.name, key, err)
	}
	return out, nil
}

// handleTx is handle inside tx.
func handleTx[DB, Tx any, F ~func(context.Context, Tx) (any, error)](ctx context.Context, c *Consumer, store Store[DB, Tx], tx Tx, key string, sum []byte, fn F) (Outcome, error) {
	inserted, err := store.InsertKey(ctx, tx, c.name, key, sum)
	if err != nil {
		return Outcome{}, fmt.Errorf("record key: %w", err)
	}
	if !inserted {
		return duplicate(ctx, c, store, tx, key, sum)
	}
	res, err := fn(ctx, tx)
	if err != nil || c.mode != ReturnStored {
		return Outcome{}, err
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return Outcome{}, fmt.Errorf("store result: %w", err)
	}
	if err := store.StoreResult(ctx, tx, c.name, key, raw); err != nil {
		return Outcome{}, fmt.Errorf("store result: %w", err)
	}
	return Outcome{Result: raw}, nil
}

// duplicate decides what an existing key means for a message with content hash sum.
func duplicate[DB, Tx any](ctx context.Context, c *Consumer, store Store[DB, Tx], tx Tx, key string, sum []byte) (Outcome, error) {
	stored, result, err := store.ReadKey(ctx, tx, c.name, key)
	if err != nil {
		// No row: the key was purged between the two statements; the caller's
		// retry processes the message as new.
		return Outcome{}, fmt.Errorf("read key: %w", err)
	}
	if stored != nil && sum != nil && !bytes.Equal(stored, sum) {
		return Outcome{}, c.conflict(ctx, key, stored, sum)
	}
	out := Outcome{Duplicate: true}
	switch c.mode {
	case Fail:
		return out, ErrDuplicate
	case ReturnStored:
		if result != nil {
			out.Result = result
		}
	}
	return out, nil
}
