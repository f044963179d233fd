package mysqlinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"example.com/shop/platform/inbox"
)

// purgeChunk deletes at most the last argument's number of keys of a consumer
// (every consumer when it is ”) processed before a time, oldest first.
const purgeChunk = `DELETE FROM processed_event
WHERE (? = '' OR consumer = ?) AND processed_at < ?
ORDER BY processed_at
LIMIT ?`

// Purge deletes the processed_event keys of consumer ("" for every consumer) that
// were processed more than olderThan ago, measured against the database's UTC
// clock when Purge starts (docs/architecture.md, rule 5), as inbox.Purge does on
// PostgreSQL: chunks of inbox.PurgeChunk rows, each a READ COMMITTED transaction
// of its own (no gap locks, so new keys are inserted while it runs), until none
// is left. It returns how many rows it deleted, also when it fails part way.
//
// A purged key lets a late copy of its message be processed again: olderThan must
// exceed the longest time a copy can come back. olderThan <= 0 is refused.
func Purge(ctx context.Context, db *sql.DB, consumer string, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, errors.New("purge processed_event: the horizon must be positive")
	}
	// As text, so the DSN needs no parseTime; the server compares it as DATETIME.
	var cutoff string
	if err := db.QueryRowContext(ctx, `SELECT CAST(UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AS CHAR)`,
		olderThan.Microseconds()).Scan(&cutoff); err != nil {
		return 0, fmt.Errorf("purge processed_event: read the clock: %w", err)
	}
	var total int64
	for {
		n, err := purgeOnce(ctx, db, consumer, cutoff)
		total += n
		if err != nil {
			return total, fmt.Errorf("purge processed_event before %s UTC: %w", cutoff, err)
		}
		if n < inbox.PurgeChunk {
			return total, nil
		}
	}
}

// purgeOnce deletes one chunk in a READ COMMITTED transaction.
func purgeOnce(ctx context.Context, db *sql.DB, consumer, cutoff string) (int64, error) {
	var n int64
	err := inTx(ctx, db, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, purgeChunk, consumer, consumer, cutoff, inbox.PurgeChunk)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
