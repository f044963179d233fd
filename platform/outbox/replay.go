package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/pg"
)

// DefaultReplayHorizon is how far back Replay may start without Force: a week,
// the default of the consumers' INBOX_MIN_RETENTION, which it must not exceed.
const DefaultReplayHorizon = 168 * time.Hour

// replayChunk is the most rows one replay transaction puts back in line.
const replayChunk = 5000

// ErrBeyondHorizon is returned, wrapped, by Replay for a period that starts
// before now - Horizon without Force: the consumers may have purged the
// processed_event keys of such events, and would apply them again.
var ErrBeyondHorizon = errors.New("replay period starts before the replay horizon")

// ReplayRequest selects the published outbox rows that Replay puts back in line.
type ReplayRequest struct {
	// Since and Until bound the period of occurred_at: Since <= occurred_at < Until.
	// Since must be before Until.
	Since, Until time.Time
	// EventName, when not empty, limits the replay to rows of that event name.
	EventName string
	// Horizon is the oldest Since accepted without Force, as a distance from now
	// (0 means DefaultReplayHorizon). It must not exceed the consumers'
	// INBOX_MIN_RETENTION (docs/architecture.md rule 5).
	Horizon time.Duration
	// Force accepts a Since older than Horizon.
	Force bool
	// DryRun counts the rows without changing anything.
	DryRun bool
	// Now is the present moment of the horizon check (zero: time.Now()).
	Now time.Time
}

// ReplayResult is what Replay found in the period.
type ReplayResult struct {
	// Replayed is the number of published rows put back in line (with DryRun, the
	// number that would be).
	Replayed int64
	// Pending is the number of rows of the period that were not published yet:
	// they are in line already and were left alone.
	Pending int64
}

// Validate reports a request Replay refuses: an empty or reversed period, a
// negative horizon, or (without Force) a Since older than now - Horizon, which
// wraps ErrBeyondHorizon.
func (r ReplayRequest) Validate() error {
	if !r.Since.Before(r.Until) {
		return fmt.Errorf("replay outbox: since %s is not before until %s",
			r.Since.Format(time.RFC3339Nano), r.Until.Format(time.RFC3339Nano))
	}
	if r.Horizon < 0 {
		return fmt.Errorf("replay outbox: horizon %v must be positive", r.Horizon)
	}
	horizon := r.Horizon
	if horizon == 0 {
		horizon = DefaultReplayHorizon
	}
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	if oldest := now.Add(-horizon); !r.Force && r.Since.Before(oldest) {
		return fmt.Errorf("replay outbox: since %s is before %s (now - %v): %w; consumers may have purged "+
			"the keys of older events and would apply them again (use force only if you know they still hold them)",
			r.Since.UTC().Format(time.RFC3339), oldest.UTC().Format(time.RFC3339), horizon, ErrBeyondHorizon)
	}
	return nil
}

// Replay puts the published outbox rows whose occurred_at falls in
// [req.Since, req.Until) (and whose event_name is req.EventName, when set) back
// in line for the relay: published_at = NULL and replays + 1 on the same row,
// which keeps its id, envelope and occurred_at. The relay then publishes each
// once more, with the same event_id, so every consumer that still holds the
// event's processed_event key counts it as a duplicate and applies nothing
// (docs/architecture.md rules 3 and 5); a consumer that lost the key (a replay
// past the horizon) still applies no stale state, by rule 4.
//
// Order: replayed rows keep their occurred_at, so the relay sends them in
// (occurred_at, id) order among themselves. Being older than any row written
// since, they go out before the rows still waiting in the outbox: consumers see
// the replayed events after newer ones, as with any redelivery.
//
// Rows are replayed in chunks of at most 5,000 in (occurred_at, id) order, each
// its own transaction, which also wakes the relay (NOTIFY on NotifyChannel). A
// row is replayed at most once per call, even when the relay publishes it again
// while later chunks are still being replayed. Rows not published yet are left
// alone and counted in Pending. It returns what it did also when it stops early
// on an error or the end of ctx. Request errors are those of Validate.
func Replay(ctx context.Context, pool *pgxpool.Pool, req ReplayRequest) (ReplayResult, error) {
	var res ReplayResult
	if err := req.Validate(); err != nil {
		return res, err
	}
	since, until := req.Since.UTC(), req.Until.UTC()
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NULL),
			count(*) FILTER (WHERE published_at IS NOT NULL)
		FROM outbox
		WHERE occurred_at >= $1 AND occurred_at < $2 AND ($3 = '' OR event_name = $3)`,
		since, until, req.EventName).Scan(&res.Pending, &res.Replayed); err != nil {
		return res, fmt.Errorf("replay outbox: count the period: %w", err)
	}
	if req.DryRun {
		return res, nil
	}
	res.Replayed = 0
	// Keyset over (occurred_at, id): each chunk starts after the last row of the
	// one before, so a row the relay has published again is not taken twice.
	curAt, curID := since, "00000000-0000-0000-0000-000000000000"
	for {
		var n int64
		var lastAt *time.Time
		var lastID *string
		err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
			err := tx.QueryRow(ctx, `WITH chunk AS (
					SELECT id FROM outbox
					WHERE published_at IS NOT NULL
					  AND occurred_at < $2 AND (occurred_at, id) > ($1, $3::uuid)
					  AND ($4 = '' OR event_name = $4)
					ORDER BY occurred_at, id
					LIMIT $5
					FOR UPDATE),
				done AS (
					UPDATE outbox o SET published_at = NULL, replays = o.replays + 1
					FROM chunk WHERE o.id = chunk.id
					RETURNING o.occurred_at, o.id)
				SELECT count(*), max(occurred_at),
					(SELECT id::text FROM done ORDER BY occurred_at DESC, id DESC LIMIT 1)
				FROM done`, curAt, until, curID, req.EventName, replayChunk).Scan(&n, &lastAt, &lastID)
			if err != nil || n == 0 {
				return err
			}
			_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, NotifyChannel)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("replay outbox: after %d rows: %w", res.Replayed, err)
		}
		res.Replayed += n
		if n < replayChunk {
			return res, nil
		}
		curAt, curID = *lastAt, *lastID
	}
}
