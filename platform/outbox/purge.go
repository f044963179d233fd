package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// purgeChunk is the most rows one purge statement deletes, so that no
// single transaction grows with the table.
const purgeChunk = 5000

// Purge deletes outbox rows published more than olderThan ago, in chunks of
// at most 5,000 rows, each chunk its own transaction, until none is left
// (docs/architecture.md, rule 5: published rows are kept as a dated log up to the
// horizon). Unpublished rows are never deleted, whatever their age. It
// returns the number of rows deleted, also when it stops early on an error
// or the end of ctx. olderThan must be positive.
func Purge(ctx context.Context, pool *pgxpool.Pool, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("purge outbox: horizon %v must be positive", olderThan)
	}
	var total int64
	for {
		tag, err := pool.Exec(ctx, `DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox
			WHERE published_at IS NOT NULL AND published_at < now() - $1::interval
			LIMIT $2)`, olderThan, purgeChunk)
		if err != nil {
			return total, fmt.Errorf("purge outbox rows published before %v ago: %w", olderThan, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < purgeChunk {
			return total, nil
		}
	}
}
