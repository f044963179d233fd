package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"example.com/shop/platform/amqp"
	"example.com/shop/platform/pg"
)

// batchTx is one transaction of a partition the relay leads: the relay's core
// (docs/architecture.md, rule 2). run is the canonical loop of the package
// documentation, pipelined: the next batch is selected and sent while the
// broker confirms the one before, and a batch is marked while the broker
// confirms the one after it, so the broker and the database work at the same
// time. The first failure ends the transaction: the confirmed prefix is
// marked, the failure recorded on the row that failed, nothing after it is
// marked (a message sent after it is published again later), and the
// transaction commits. A transaction starts a batch only while at least half
// of ConfirmTimeout is left of its publishing deadline, and its stream sends
// nothing after that deadline (ConfirmTimeout after it opened).
type batchTx struct {
	w          *worker
	limit      int // rows per batch
	maxBatches int // batches in this transaction at most

	ctx      context.Context // the database work's: outlives w.ctx so a confirmed prefix is still marked, bounded
	tx       pgx.Tx
	stream   Stream
	deadline time.Time // the stream's: no message is sent after it
	base     int       // the stream's index of cur.msgs[0]
	cur      *inFlight // the batch the broker is confirming
	selected int       // rows of the last batch selected: limit when the partition may have more
	marked   int       // rows marked published
	pubErr   error     // the broker failure that ended the transaction, nil when none
	failedID string    // the row pubErr is recorded on
}

// run is the transaction's body; pg.WithTx commits what it marked.
func (t *batchTx) run(tx pgx.Tx) error {
	t.tx = tx
	w := t.w
	msgs, err := w.r.selectBatch(w.ctx, tx, w.p.n, w.lockPID, t.limit) // SELECT ... FOR UPDATE SKIP LOCKED
	if err != nil || len(msgs) == 0 {
		return err
	}
	w.setBusy(time.Now())
	defer w.setBusy(time.Time{})
	t.deadline = time.Now().Add(w.r.cfg.ConfirmTimeout)
	t.stream = w.pub.Stream(w.pubCtx, w.r.cfg.ConfirmTimeout)
	defer t.stream.Close()
	t.cur, t.selected = t.send(msgs), len(msgs) // publish
	for batches := 1; ; batches++ {
		next, err := t.sendNext(batches) // pipelining: the next batch goes out while cur is confirmed
		if err != nil {
			t.cur.end(w.ctx, w.r, 0, nil)
			return err
		}
		confirmed, pubErr := t.confirm() // wait for the publisher confirms
		stop := pubErr != nil || confirmed < len(t.cur.msgs) || next == nil
		err = t.mark(confirmed, pubErr) // UPDATE outbox SET published_at = now()
		if next != nil && (stop || err != nil) {
			next.end(w.ctx, w.r, 0, nil)
		}
		if err != nil || stop {
			return err // COMMIT, or ROLLBACK on a database error
		}
		t.base += len(t.cur.msgs)
		t.cur, t.selected = next, len(next.msgs)
	}
}

// transaction runs one batchTx of w's partition, with batches of up to limit
// rows and at most maxBatches of them, and returns it with its outcome: nil,
// a publish failure (t.pubErr is set), errLockLost when the lead lock is
// gone, errPartitionBusy when a former leader's batch is still open, or a
// database error. The end of w.ctx stops it between batches and is no
// failure; publishing stops early only when w.pubCtx ends.
func (w *worker) transaction(limit, maxBatches int) (*batchTx, error) {
	// Database work outlives w.ctx so that a confirmed prefix is still marked
	// on shutdown, but it is bounded; when the relay stops, what is left gets
	// stopTimeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), w.r.cfg.ConfirmTimeout+2*finishTimeout)
	defer cancel()
	defer context.AfterFunc(w.pubCtx, func() { time.AfterFunc(stopTimeout, cancel) })()
	t := &batchTx{w: w, ctx: ctx, limit: limit, maxBatches: maxBatches}
	return t, t.outcome(pg.WithTx(ctx, w.r.pool, t.run))
}

// send starts the send spans of msgs and adds msgs to the stream.
func (t *batchTx) send(msgs []amqp.Message) *inFlight {
	r := t.w.r
	r.m.batchSize.Observe(float64(len(msgs)))
	f := &inFlight{msgs: msgs, spans: r.startSends(t.w.ctx, t.w.pub.Exchange(), msgs), start: time.Now()}
	t.stream.Send(msgs)
	return f
}

// sendNext selects and sends the batch after cur, unless cur was not full,
// the transaction has sent maxBatches, the partition's work ends or less than
// half of ConfirmTimeout is left; it returns nil when it sends none.
func (t *batchTx) sendNext(batches int) (*inFlight, error) {
	w := t.w
	if len(t.cur.msgs) < t.limit || batches >= t.maxBatches || w.ctx.Err() != nil ||
		time.Until(t.deadline) <= w.r.cfg.ConfirmTimeout/2 {
		return nil, nil
	}
	rows, err := w.r.selectAfter(t.ctx, t.tx, w.p.n, t.cur.msgs[len(t.cur.msgs)-1], t.limit)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return t.send(rows), nil
}

// confirm waits for the broker's confirms of cur and ends its spans. It
// returns the length of cur's confirmed prefix and the error that ended the
// stream before cur was confirmed, if any.
func (t *batchTx) confirm() (int, error) {
	total, err := t.stream.Wait(t.base + len(t.cur.msgs))
	confirmed := min(max(total-t.base, 0), len(t.cur.msgs))
	t.cur.end(t.w.ctx, t.w.r, confirmed, err)
	return confirmed, err
}

// markPublishedSQL marks the confirmed rows of a batch published.
const markPublishedSQL = `UPDATE outbox SET published_at = now() WHERE id = ANY($1::uuid[])`

// mark marks cur's confirmed prefix published and, when pubErr stopped cur
// (a broker failure, not the relay's own stop), records it on the row that
// failed; both in one round trip.
func (t *batchTx) mark(confirmed int, pubErr error) error {
	msgs := t.cur.msgs
	b := &pgx.Batch{}
	if confirmed > 0 {
		ids := make([]string, confirmed)
		for i := range ids {
			ids[i] = msgs[i].MessageID
		}
		b.Queue(markPublishedSQL, ids)
	}
	if pubErr != nil && confirmed < len(msgs) && t.w.pubCtx.Err() == nil {
		t.pubErr = t.w.r.explain(pubErr)
		t.failedID = msgs[confirmed].MessageID
		b.Queue(recordFailureSQL, t.failedID, errorText(t.pubErr))
	}
	if b.Len() > 0 {
		if err := t.tx.SendBatch(t.ctx, b).Close(); err != nil {
			return fmt.Errorf("mark %d published rows: %w", confirmed, err)
		}
	}
	t.marked += confirmed
	return nil
}

// outcome counts what the transaction published and failed, and turns err,
// the transaction's error, into transaction's result. When the transaction
// failed after a publish failure (it expired while the broker kept it
// waiting, say), the failure is recorded in a short transaction of its own.
func (t *batchTx) outcome(err error) error {
	r, ctx := t.w.r, t.w.ctx
	if t.pubErr != nil {
		r.m.failures.Inc()
		if err != nil {
			if rerr := r.recordFailure(ctx, t.failedID, t.pubErr); rerr != nil {
				r.logger.WarnContext(ctx, "outbox relay: could not record a failed publish", slog.String("event_id", t.failedID),
					slog.Any("error", rerr), slog.Any("publish_error", t.pubErr))
			}
			return fmt.Errorf("outbox relay batch: %w (and the batch's transaction failed: %v)", t.pubErr, err)
		}
		r.m.published.Add(float64(t.marked))
		return fmt.Errorf("outbox relay batch: %w", t.pubErr)
	}
	switch {
	case err == nil:
		r.m.published.Add(float64(t.marked))
		return nil
	case ctx.Err() != nil:
		return nil // shutdown or partition given back: not a failure
	case errors.Is(err, errLockLost), errors.Is(err, errPartitionBusy):
		return err
	}
	return fmt.Errorf("outbox relay batch: %w", err)
}

// inFlight is a batch sent on a stream and not yet confirmed, with its
// send spans.
type inFlight struct {
	msgs  []amqp.Message
	spans []trace.Span
	start time.Time
}

// end ends the batch's spans once the broker confirmed its first confirmed
// messages and err (if any) stopped it at the next one, and records how
// long a fully confirmed batch took.
func (f *inFlight) end(ctx context.Context, r *Relay, confirmed int, err error) {
	r.endSends(ctx, f.spans, f.msgs, confirmed, err)
	if confirmed == len(f.msgs) {
		r.m.confirmLatency.Observe(time.Since(f.start).Seconds())
	}
}

// selectAfterSQL is selectBatchSQL for the rows after ($4, $5) in publishing order.
const selectAfterSQL = `SELECT ` + rowColumns + ` FROM outbox
	WHERE published_at IS NULL AND key_hash % $2 = $3 AND (occurred_at, id) > ($4, $5::uuid)
	ORDER BY outbox.occurred_at, outbox.id
	LIMIT $1
	FOR UPDATE SKIP LOCKED`

// selectAfter locks and reads the next at most limit rows of partition
// part after the row of after, in publishing order, within the
// transaction that selected after (whose batch lock keeps every other
// relay off the partition).
func (r *Relay) selectAfter(ctx context.Context, tx pgx.Tx, part int, after amqp.Message, limit int) ([]amqp.Message, error) {
	rows, err := tx.Query(ctx, selectAfterSQL, limit, r.keys.partitions, part, after.Timestamp, after.MessageID)
	if err != nil {
		return nil, fmt.Errorf("select outbox batch: %w", err)
	}
	return scanBatch(rows, limit)
}

// scanBatch reads the rows of a batch query into messages and closes rows.
func scanBatch(rows pgx.Rows, limit int) ([]amqp.Message, error) {
	defer rows.Close()
	batch := make([]amqp.Message, 0, limit)
	for rows.Next() {
		var row row
		if err := rows.Scan(row.scanArgs()...); err != nil {
			return nil, fmt.Errorf("scan outbox row: %w", err)
		}
		batch = append(batch, message(row))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("select outbox batch: %w", err)
	}
	return batch, nil
}

// recordFailureSQL counts a failed publish on its row.
const recordFailureSQL = `UPDATE outbox SET attempts = attempts + 1, last_error = $2
	WHERE id = $1::uuid AND published_at IS NULL`

// recordFailure counts a failed publish on row id in a short transaction
// of its own, bounded by finishTimeout even when ctx has ended.
func (r *Relay) recordFailure(ctx context.Context, id string, pubErr error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	_, err := r.pool.Exec(rctx, recordFailureSQL, id, errorText(pubErr))
	return err
}

// selectBatchSQL locks and reads the next at most $1 unpublished rows of
// partition $3 of $2, in publishing order, skipping the rows another
// transaction holds. Its ORDER BY names the table's columns: the output
// column id is id::text, and sorting by it would keep the partial index
// outbox_unpublished_idx from giving the order (the relay's other
// statements do the same).
const selectBatchSQL = `SELECT ` + rowColumns + ` FROM outbox
	WHERE published_at IS NULL AND key_hash % $2 = $3
	ORDER BY outbox.occurred_at, outbox.id
	LIMIT $1
	FOR UPDATE SKIP LOCKED`

// batchSettingsSQL sets, for the batch transaction alone, the idle timeout
// ($1, in ms) and the plans of the relay's statements: each walks an index,
// never the table, whatever its statistics say. The relay runs them thousands
// of times on the same sessions: a plan cached while the outbox was small (a
// sequential scan) would otherwise stay as the table grows, until an ANALYZE
// of it; and a bitmap scan of outbox_unpublished_idx reads every entry it
// still holds for rows published since the last vacuum, and the heap page of
// each, where a walk in index order stops at the batch's last row and marks
// the entries of dead rows so that later walks skip them.
const batchSettingsSQL = `SELECT set_config('idle_in_transaction_session_timeout', $1, true),
	set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)`

// headSQL reads the id of partition $2 of $1's oldest unpublished row, held
// by another transaction or not.
const headSQL = `SELECT id::text FROM outbox WHERE published_at IS NULL AND key_hash % $1 = $2
	ORDER BY outbox.occurred_at, outbox.id LIMIT 1`

// selectBatch takes partition part's batch lock and the shared fence of
// this partition count for the transaction, checks that lockPID still
// leads the partition and that no fence of another count is held, locks
// and reads the partition's next batch of at most limit rows in publishing
// order, and asks the server to end the transaction if it stays idle
// longer than this batch may take (which is longer than ConfirmTimeout, so
// the batch lock and the fence outlive every send of the batch). It
// returns errPartitionBusy when another transaction holds the batch lock
// or a fence of another count (a former leader's batch, with this count
// or another), errLockLost when the lead lock is gone, and no rows when an
// older unpublished row of the partition is held by another transaction.
func (r *Relay) selectBatch(ctx context.Context, tx pgx.Tx, part int, lockPID uint32, limit int) ([]amqp.Message, error) {
	k := r.keys
	idleLimit := r.cfg.ConfirmTimeout + 2*finishTimeout
	b := &pgx.Batch{}
	b.Queue(batchSettingsSQL, strconv.FormatInt(idleLimit.Milliseconds(), 10))
	// In this order: the locks are taken before pg_locks is read.
	b.Queue(`SELECT pg_try_advisory_xact_lock($1::int, $2::int), pg_try_advisory_xact_lock_shared($3::int, $4::int),
		EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = $5 AND objsubid = 2
		  AND database = `+currentDB+` AND classid = $6::bigint::oid AND objid = $2::bigint::oid),
		EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
		  AND database = `+currentDB+` AND classid = $3::bigint::oid AND objid <> $4::bigint::oid)`,
		k.batch, part, k.fence, k.partitions, int64(lockPID), int64(k.lead))
	b.Queue(selectBatchSQL, limit, k.partitions, part)
	b.Queue(headSQL, k.partitions, part)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("set transaction idle timeout: %w", err)
	}
	var batchLock, fence, held, otherCount bool
	if err := br.QueryRow().Scan(&batchLock, &fence, &held, &otherCount); err != nil {
		return nil, fmt.Errorf("take the partition's batch lock: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("select outbox batch: %w", err)
	}
	batch, err := scanBatch(rows, limit)
	if err != nil {
		return nil, err
	}
	var head string
	switch err := br.QueryRow().Scan(&head); {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("select first unpublished row: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("select outbox batch: %w", err)
	}
	switch {
	case !held:
		return nil, errLockLost
	case !batchLock || !fence || otherCount:
		return nil, errPartitionBusy
	}
	if len(batch) > 0 && head != "" && head != batch[0].MessageID {
		r.logger.DebugContext(ctx, "outbox relay waits: an older row is held by another transaction",
			slog.Int("partition", part), slog.String("event_id", head))
		return nil, nil
	}
	return batch, nil
}
