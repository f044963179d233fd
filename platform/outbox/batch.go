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
	"example.com/shop/platform/backoff"
	"example.com/shop/platform/pg"
)

// errPartitionBusy means a batch transaction of the partition is still open
// elsewhere (a former leader's): this leader waits for it to end.
var errPartitionBusy = errors.New("another batch of the partition is still open")

// lead publishes partition p until ctx ends (given back, or the relay
// stops) or its batch finds the lock gone. A batch being published when
// the partition is given back is finished first (its publishing ends only
// with relayCtx, the relay's own end, or its deadline), so a rebalance
// sends nothing twice.
func (r *Relay) lead(relayCtx, ctx context.Context, p *partition, lockPID uint32) {
	pub := r.newPublisher()
	defer func() { _ = pub.Close() }()
	defer func() {
		r.mu.Lock()
		p.busySince, p.failingSince, p.lastFailure = time.Time{}, time.Time{}, nil
		r.mu.Unlock()
	}()
	label := strconv.Itoa(p.n)
	// Retry for as long as it leads; after a failed publish, send only the failing row.
	bo := backoff.New(r.cfg.PollInterval, r.cfg.MaxBackoff)
	single := false
	for {
		limit, batches := r.cfg.BatchSize, batchesPerTx
		if single {
			limit, batches = 1, 1
		}
		n, pubFailed, err := r.publishBatch(ctx, relayCtx, pub, p, lockPID, limit, batches)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errLockLost) {
			r.logger.WarnContext(ctx, "outbox relay: partition lock lost", slog.Int("partition", p.n))
			return
		}
		var wait <-chan struct{} = p.wake
		delay := r.cfg.PollInterval
		switch {
		case errors.Is(err, errPartitionBusy):
			r.logger.DebugContext(ctx, "outbox relay waits for a former leader's batch to end", slog.Int("partition", p.n))
		case err != nil:
			r.m.partFailures.WithLabelValues(label).Add(boolToFloat(pubFailed))
			r.noteFailure(ctx, p, err, limit)
			single = single || pubFailed
			wait = nil // back off, however busy the outbox is
			delay = bo.NextBackOff()
		default:
			r.noteSuccess(ctx, p)
			single = false
			bo.Reset()
			if n == limit {
				continue
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-wait:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

func boolToFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// noteFailure remembers a failed batch for Ready and logs it: at WARN when
// a streak of failures starts or its reason changes, at DEBUG otherwise.
func (r *Relay) noteFailure(ctx context.Context, p *partition, err error, limit int) {
	r.mu.Lock()
	first := p.failingSince.IsZero()
	if first {
		p.failingSince = time.Now()
	}
	changed := !first && failureReason(err) != failureReason(p.lastFailure)
	p.lastFailure = err
	since := p.failingSince
	r.mu.Unlock()
	switch {
	case first:
		r.logger.WarnContext(ctx, "outbox relay cannot publish; retrying the first unpublished row alone, with backoff",
			slog.Int("partition", p.n), slog.Any("error", err))
	case changed:
		r.logger.WarnContext(ctx, "outbox relay still cannot publish, for another reason", slog.Int("partition", p.n),
			slog.Any("error", err), slog.Duration("failing_for", time.Since(since).Round(time.Millisecond)))
	default:
		r.logger.DebugContext(ctx, "outbox relay batch failed again", slog.Int("partition", p.n), slog.Any("error", err), slog.Int("batch_limit", limit))
	}
}

// noteSuccess ends a streak of failures, logging how long it lasted.
func (r *Relay) noteSuccess(ctx context.Context, p *partition) {
	r.mu.Lock()
	since := p.failingSince
	p.failingSince, p.lastFailure = time.Time{}, nil
	r.mu.Unlock()
	if !since.IsZero() {
		r.logger.InfoContext(ctx, "outbox relay publishes again", slog.Int("partition", p.n),
			slog.Duration("failed_for", time.Since(since).Round(time.Millisecond)))
	}
}

// failureReason is the part of a batch error that says why, without the
// message id and batch index that change from one attempt to the next.
func failureReason(err error) string {
	if err == nil {
		return ""
	}
	var pe *amqp.PublishError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// batchesPerTx caps the batches one transaction of a partition publishes
// and marks: a crash between a send and the commit publishes at most this
// many batches again (duplicates, never a loss), and each commit makes the
// marks visible (the backlog gauges, the auditor).
const batchesPerTx = 8

// publishBatch runs one transaction of partition p (docs/architecture.md,
// rule 2): take the partition's batch lock, check that lockPID still leads
// p, then publish the partition's rows in at most maxBatches batches of up
// to limit rows, in (occurred_at, id) order, on one publishing stream, and
// commit. The
// batches are pipelined: the next batch is selected and sent while the
// broker confirms the one before, and a batch is marked while the broker
// confirms the one after it, so the broker and the database work at the
// same time and the broker never waits for the relay between batches. The
// first failure ends the transaction: the confirmed prefix is marked, the
// failure recorded on the row that failed, nothing after it is marked (a
// message sent after it is published again later), and the transaction
// commits. A transaction starts a batch only while at least half of
// ConfirmTimeout is left of its publishing deadline, and sends nothing
// after that deadline (ConfirmTimeout after its stream opened). After a
// failure the leader asks for one batch of one row: only the failing row
// is sent until the broker takes it.
//
// It returns the number of rows in the last batch selected (limit when the
// partition may have more), whether publishing failed (as opposed to the
// database), and the transaction's error, if any: errLockLost when the
// lock is gone, errPartitionBusy when a former leader's batch is still
// open. ctx ends the partition's work (no new batch starts); publishing
// stops early only when pubCtx ends.
func (r *Relay) publishBatch(ctx, pubCtx context.Context, pub Publisher, p *partition, lockPID uint32, limit, maxBatches int) (int, bool, error) {
	// Database work outlives ctx so that a confirmed prefix is still marked
	// on shutdown, but it is bounded.
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ConfirmTimeout+2*finishTimeout)
	defer cancel()

	var last, marked int
	var pubErr error
	var failedID string
	err := pg.WithTx(txCtx, r.pool, func(tx pgx.Tx) error {
		msgs, err := r.selectBatch(ctx, tx, p.n, lockPID, limit)
		if err != nil {
			return err
		}
		last = len(msgs)
		if last == 0 {
			return nil
		}
		r.setBusy(p, time.Now())
		defer r.setBusy(p, time.Time{})
		deadline := time.Now().Add(r.cfg.ConfirmTimeout)
		s := pub.Stream(pubCtx, r.cfg.ConfirmTimeout)
		defer s.Close()
		base := 0 // the stream's index of msgs[0]
		cur := r.sendBatch(ctx, s, pub, msgs)
		for batches := 1; ; batches++ {
			// While the broker confirms msgs: select and send the next batch.
			var next *inFlight
			if last == limit && batches < maxBatches && ctx.Err() == nil &&
				time.Until(deadline) > r.cfg.ConfirmTimeout/2 {
				rows, err := r.selectAfter(txCtx, tx, p.n, msgs[len(msgs)-1], limit)
				if err != nil {
					cur.end(ctx, r, 0, nil)
					return err
				}
				if len(rows) > 0 {
					next = r.sendBatch(ctx, s, pub, rows)
				}
			}
			total, err := s.Wait(base + len(msgs))
			confirmed := min(max(total-base, 0), len(msgs))
			cur.end(ctx, r, confirmed, err)
			stop := err != nil || confirmed < len(msgs) || next == nil
			if stop && next != nil {
				next.end(ctx, r, 0, nil)
			}
			// While the broker confirms next: mark msgs.
			b := &pgx.Batch{}
			if confirmed > 0 {
				ids := make([]string, confirmed)
				for i := range ids {
					ids[i] = msgs[i].MessageID
				}
				b.Queue(`UPDATE outbox SET published_at = now() WHERE id = ANY($1::uuid[])`, ids)
			}
			if err != nil && confirmed < len(msgs) && pubCtx.Err() == nil {
				// A broker failure, not our shutdown: count it on the row that
				// stopped the batch.
				pubErr = r.explain(err)
				failedID = msgs[confirmed].MessageID
				b.Queue(recordFailureSQL, failedID, errorText(pubErr))
			}
			if b.Len() > 0 {
				if err := tx.SendBatch(txCtx, b).Close(); err != nil {
					if !stop {
						next.end(ctx, r, 0, nil)
					}
					return fmt.Errorf("mark %d published rows: %w", confirmed, err)
				}
			}
			marked += confirmed
			if stop {
				return nil
			}
			base += len(msgs)
			msgs, last, cur = next.msgs, len(next.msgs), next
		}
	})
	if pubErr != nil {
		r.m.failures.Inc()
		if err != nil {
			// The batch's transaction is gone (it expired while the broker
			// kept us waiting, say): record the failure on its own.
			if rerr := r.recordFailure(ctx, failedID, pubErr); rerr != nil {
				r.logger.WarnContext(ctx, "outbox relay: could not record a failed publish", slog.String("event_id", failedID),
					slog.Any("error", rerr), slog.Any("publish_error", pubErr))
			}
			return last, true, fmt.Errorf("outbox relay batch: %w (and the batch's transaction failed: %v)", pubErr, err)
		}
		r.m.published.Add(float64(marked))
		return last, true, fmt.Errorf("outbox relay batch: %w", pubErr)
	}
	if err != nil {
		if ctx.Err() != nil {
			return last, false, nil // shutdown or partition given back: not a failure
		}
		if errors.Is(err, errLockLost) || errors.Is(err, errPartitionBusy) {
			return last, false, err
		}
		return last, false, fmt.Errorf("outbox relay batch: %w", err)
	}
	r.m.published.Add(float64(marked))
	return last, false, nil
}

// inFlight is a batch sent on a stream and not yet confirmed, with its
// send spans.
type inFlight struct {
	msgs  []amqp.Message
	spans []trace.Span
	start time.Time
}

// sendBatch starts the send spans of msgs and adds msgs to the stream.
func (r *Relay) sendBatch(ctx context.Context, s Stream, pub Publisher, msgs []amqp.Message) *inFlight {
	r.m.batchSize.Observe(float64(len(msgs)))
	f := &inFlight{msgs: msgs, spans: r.startSends(ctx, pub.Exchange(), msgs), start: time.Now()}
	s.Send(msgs)
	return f
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

// selectAfter locks and reads the next at most limit rows of partition
// part after the row of after, in publishing order, within the
// transaction that selected after (whose batch lock keeps every other
// relay off the partition).
func (r *Relay) selectAfter(ctx context.Context, tx pgx.Tx, part int, after amqp.Message, limit int) ([]amqp.Message, error) {
	rows, err := tx.Query(ctx, `SELECT `+rowColumns+` FROM outbox
		WHERE published_at IS NULL AND key_hash % $2 = $3 AND (occurred_at, id) > ($4, $5::uuid)
		ORDER BY occurred_at, id
		LIMIT $1
		FOR UPDATE SKIP LOCKED`, limit, r.keys.partitions, part, after.Timestamp, after.MessageID)
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

func (r *Relay) setBusy(p *partition, since time.Time) {
	r.mu.Lock()
	p.busySince = since
	r.mu.Unlock()
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

// selectBatch takes partition part's batch lock and the shared fence of
// this partition count for the transaction, checks that lockPID still
// leads the partition, locks and reads the partition's next batch of at
// most limit rows in publishing order, and asks the server to end the
// transaction if it stays idle longer than this batch may take (which is
// longer than ConfirmTimeout, so the batch lock outlives every send of the
// batch). It returns errPartitionBusy when another transaction holds the
// batch lock, errLockLost when the lead lock is gone, and no rows when an
// older unpublished row of the partition is held by another transaction.
func (r *Relay) selectBatch(ctx context.Context, tx pgx.Tx, part int, lockPID uint32, limit int) ([]amqp.Message, error) {
	k := r.keys
	idleLimit := r.cfg.ConfirmTimeout + 2*finishTimeout
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true)`,
		strconv.FormatInt(idleLimit.Milliseconds(), 10))
	b.Queue(`SELECT pg_try_advisory_xact_lock($1::int, $2::int), pg_try_advisory_xact_lock_shared($3::int, $4::int),
		EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = $5 AND objsubid = 2
		  AND database = `+currentDB+` AND classid = $6::bigint::oid AND objid = $2::bigint::oid)`,
		k.batch, part, k.fence, k.partitions, int64(lockPID), int64(k.lead))
	b.Queue(`SELECT `+rowColumns+` FROM outbox
		WHERE published_at IS NULL AND key_hash % $2 = $3
		ORDER BY occurred_at, id
		LIMIT $1
		FOR UPDATE SKIP LOCKED`, limit, k.partitions, part)
	b.Queue(`SELECT id::text FROM outbox WHERE published_at IS NULL AND key_hash % $1 = $2
		ORDER BY occurred_at, id LIMIT 1`, k.partitions, part)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("set transaction idle timeout: %w", err)
	}
	var batchLock, fence, held bool
	if err := br.QueryRow().Scan(&batchLock, &fence, &held); err != nil {
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
	case !batchLock || !fence:
		return nil, errPartitionBusy
	}
	if len(batch) > 0 && head != "" && head != batch[0].MessageID {
		r.logger.DebugContext(ctx, "outbox relay waits: an older row is held by another transaction",
			slog.Int("partition", part), slog.String("event_id", head))
		return nil, nil
	}
	return batch, nil
}
