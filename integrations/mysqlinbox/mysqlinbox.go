// Package mysqlinbox is the inbox (package inbox) on MySQL 8 and MariaDB 10.6 or
// later through database/sql and github.com/go-sql-driver/mysql: the same
// processed_event table, algorithm, modes, content check and counters as on
// PostgreSQL (docs/architecture.md, rule 3), with the handler writing through a
// *sql.Tx.
//
//	billing := mysqlinbox.NewConsumer(inbox.Config{Name: "billing.cashback"})
//	out, err := billing.Handle(ctx, db, inbox.Message{Key: key, Content: body},
//	    func(ctx context.Context, tx *sql.Tx) (any, error) {
//	        _, err := tx.ExecContext(ctx, `UPDATE wallet SET cashback = cashback + ? WHERE user_id = ?`, amount, user)
//	        return nil, err
//	    })
//
// The key is inserted first, in a READ COMMITTED transaction. A duplicate is the
// server's error 1062 (ER_DUP_ENTRY) on that insert, read from the error's number,
// never from its text; 1062 rolls back the statement only, so the transaction
// goes on to read the stored row. INSERT IGNORE is not used: it would also turn a
// NULL, a truncated value or a failed constraint into a warning.
//
// InnoDB differs from PostgreSQL in two ways the store handles:
//
//   - A deadlock (1213) rolls back the whole transaction, not one statement. It is
//     a retryable failure, never a duplicate. The classic one is three copies of a
//     key: the first holds it, the other two wait with shared locks on its index
//     entry, the first rolls back, and both waiters now want the exclusive lock.
//     When the deadlock hits the key insert of a transaction of the store's own,
//     nothing else has run yet, so Handle begins again (up to DeadlockRetries
//     times) and the survivor's outcome decides: a duplicate after its commit. In a
//     joined transaction the caller's whole transaction is gone: Handle returns the
//     error (IsDeadlock reports it) and the caller retries its transaction.
//   - Gap locks: at REPEATABLE READ, MySQL's default, a range scan such as the
//     purge's locks the gaps between index entries and blocks the inserts of new
//     keys behind it. The store's transactions and every purge chunk run at READ
//     COMMITTED, where InnoDB takes no gap locks for scans. A joined transaction
//     keeps the caller's level; the store reads the stored row with a locking
//     read, which sees the committed row at any level.
package mysqlinbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"example.com/shop/platform/inbox"
)

// MySQL server error numbers the store reads.
const (
	errDupEntry        = 1062 // ER_DUP_ENTRY: the key is there
	errLockDeadlock    = 1213 // ER_LOCK_DEADLOCK: the whole transaction was rolled back
	errLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT: the statement was rolled back
)

// DeadlockRetries is how many times Handle begins its own transaction again when
// the key insert was chosen as a deadlock victim.
const DeadlockRetries = 3

// DB is where Handle runs: a *sql.DB or *sql.Conn, on which it opens a READ
// COMMITTED transaction, or an open *sql.Tx, which it joins through a savepoint.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Consumer deduplicates the messages of one consumer in a MySQL processed_event
// table; see inbox.StoreConsumer.
type Consumer = inbox.StoreConsumer[DB, *sql.Tx]

// NewConsumer returns the consumer of cfg on MySQL, with the counters
// inbox.NewConsumer lists. It panics on an empty Name, a programming error.
func NewConsumer(cfg inbox.Config) *Consumer {
	return inbox.NewStoreConsumer[DB, *sql.Tx](Store{}, cfg)
}

// Store is the inbox.Store of MySQL and MariaDB. It is stateless.
type Store struct{}

const (
	insertKey = `INSERT INTO processed_event (consumer, message_key, payload_sha256, processed_at)
VALUES (?, ?, ?, UTC_TIMESTAMP(6))`
	// A locking read: the latest committed row whatever the snapshot (a joined
	// REPEATABLE READ transaction would not see a row committed after its first read).
	// The failed insert already holds the shared lock it takes.
	selectKey   = `SELECT payload_sha256, result FROM processed_event WHERE consumer = ? AND message_key = ? LOCK IN SHARE MODE`
	storeResult = `UPDATE processed_event SET result = ? WHERE consumer = ? AND message_key = ?`
)

// InsertKey implements inbox.Store: a duplicate is error 1062, returned as false
// with tx still usable. A concurrent holder of the key makes the insert wait for
// its commit (1062) or rollback (inserted).
func (Store) InsertKey(ctx context.Context, tx *sql.Tx, consumer, key string, sum []byte) (bool, error) {
	_, err := tx.ExecContext(ctx, insertKey, consumer, key, sum)
	switch number(err) {
	case 0:
		if err != nil {
			return false, err
		}
		return true, nil
	case errDupEntry:
		return false, nil
	case errLockDeadlock:
		return false, &keyDeadlock{err: err}
	}
	return false, err
}

// ReadKey implements inbox.Store; a purged key is sql.ErrNoRows.
func (Store) ReadKey(ctx context.Context, tx *sql.Tx, consumer, key string) (sum, result []byte, err error) {
	err = tx.QueryRowContext(ctx, selectKey, consumer, key).Scan(&sum, &result)
	return sum, result, err
}

// StoreResult implements inbox.Store. The JSON goes as a string: MySQL 8 refuses
// a JSON value sent as binary bytes.
func (Store) StoreResult(ctx context.Context, tx *sql.Tx, consumer, key string, result []byte) error {
	_, err := tx.ExecContext(ctx, storeResult, string(result), consumer, key)
	return err
}

// InTx implements inbox.Store: a READ COMMITTED transaction of its own on a
// *sql.DB or *sql.Conn, begun again when its key insert was a deadlock victim; a
// savepoint in an open *sql.Tx.
func (Store) InTx(ctx context.Context, db DB, fn func(tx *sql.Tx) error) error {
	switch d := db.(type) {
	case *sql.Tx:
		return inSavepoint(ctx, d, fn)
	case interface {
		BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
	}:
		for attempt := 0; ; attempt++ {
			err := inTx(ctx, d, fn)
			var kd *keyDeadlock
			if !errors.As(err, &kd) || attempt == DeadlockRetries || ctx.Err() != nil {
				return err
			}
		}
	}
	return fmt.Errorf("mysqlinbox: %T is neither a *sql.Tx nor begins transactions", db)
}

// inTx runs fn in a READ COMMITTED transaction on db: fn's error rolls it back
// (the rollback's error joined to it), a nil error commits it.
func inTx(ctx context.Context, db interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			return errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// inSavepoint runs fn inside tx behind a savepoint of its own: fn's error rolls
// back to it, leaving tx usable, unless the server already rolled tx back whole
// (a deadlock), which the returned error then says.
func inSavepoint(ctx context.Context, tx *sql.Tx, fn func(tx *sql.Tx) error) error {
	name, err := savepointName()
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(tx); err != nil {
		if IsDeadlock(err) {
			return fmt.Errorf("the server rolled back the whole joined transaction: %w", err)
		}
		if _, rbErr := tx.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+name); rbErr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
		}
		return err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+name); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

// savepointName returns a name no enclosing Handle on the same transaction uses:
// MySQL replaces a savepoint declared again under the same name.
func savepointName() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("savepoint name: %w", err)
	}
	return "inbox_" + hex.EncodeToString(b), nil
}

// keyDeadlock is a deadlock on the key insert: the transaction was rolled back
// before fn ran, so a transaction of the store's own can begin again.
type keyDeadlock struct{ err error }

func (e *keyDeadlock) Error() string {
	return "deadlock on the key, transaction rolled back (retry): " + e.err.Error()
}

func (e *keyDeadlock) Unwrap() error { return e.err }

// IsDeadlock reports whether err is a deadlock (1213) or a lock wait timeout
// (1205) of the server: a retryable failure, never a duplicate and never a bad
// message. After a deadlock the server has rolled back the whole transaction.
func IsDeadlock(err error) bool {
	n := number(err)
	return n == errLockDeadlock || n == errLockWaitTimeout
}

// number returns the MySQL server error number in err, 0 when there is none.
func number(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}
