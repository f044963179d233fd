package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PurgeChunk is the largest number of processed_event rows one Purge statement deletes,
// so a purge never holds many row locks or produces one huge transaction.
const PurgeChunk = 5000

// purgeChunk deletes at most $3 keys of consumer $1 (all consumers when $1 is ”)
// processed before $2, in table order: the BRIN index on processed_at narrows the
// scan to the old block ranges, and no sort reads every old key for each chunk.
const purgeChunk = `DELETE FROM processed_event p
USING (
    SELECT consumer, message_key FROM processed_event
    WHERE ($1 = '' OR consumer = $1) AND processed_at < $2
    LIMIT $3
) old
WHERE p.consumer = old.consumer AND p.message_key = old.message_key`

// Purge deletes the processed_event keys of consumer ("" for every consumer) that were
// processed more than olderThan ago, measured against the database clock when Purge
// starts (docs/architecture.md, rule 5). It deletes in chunks of PurgeChunk rows, each its own
// transaction, until none is left, and returns how many rows it deleted, also when it
// fails part way (ctx ended or a database error, returned wrapped).
//
// A purged key lets a late copy of its event be processed again, so olderThan must
// exceed the longest time a copy can come back (retry delays, dead-letter replays);
// callers enforce their own minimum. olderThan <= 0 is refused with an error.
func Purge(ctx context.Context, pool *pgxpool.Pool, consumer string, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, errors.New("purge processed_event: the horizon must be positive")
	}
	var cutoff time.Time
	if err := pool.QueryRow(ctx, `SELECT now() - $1::interval`, olderThan).Scan(&cutoff); err != nil {
		return 0, fmt.Errorf("purge processed_event: read the clock: %w", err)
	}
	var total int64
	for {
		tag, err := pool.Exec(ctx, purgeChunk, consumer, cutoff, PurgeChunk)
		if err != nil {
			return total, fmt.Errorf("purge processed_event before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < PurgeChunk {
			return total, nil
		}
	}
}
