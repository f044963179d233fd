package outbox

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"example.com/shop/platform/amqp"
	"example.com/shop/platform/backoff"
)

// errPartitionBusy means a batch transaction that may hold rows of the
// partition is still open elsewhere (a former leader's, of the partition or
// of another partition count): this leader waits for it to end.
var errPartitionBusy = errors.New("a former leader's batch is still open")

// batchesPerTx caps the batches one transaction of a partition publishes
// and marks: a crash between a send and the commit publishes at most this
// many batches again (duplicates, never a loss), and each commit makes the
// marks visible (the backlog gauges, the auditor). It is the pipelining
// option around rule 2 (docs/adr/0003-pipelined-publisher-confirms.md): at 1,
// batchTx.run is the plain select, publish, confirm, mark, commit; above 1 the
// same steps overlap, the next batch selected and sent while the broker
// confirms the one before.
const batchesPerTx = 8

// worker publishes one partition this relay leads, one batchTx after
// another, until the partition is given back or its lock is lost.
type worker struct {
	r       *Relay
	p       *partition
	pub     Publisher       // the partition's own channel
	lockPID uint32          // the lock session that leads p
	ctx     context.Context // ends when p is given back or the relay stops: no new batch starts
	pubCtx  context.Context // the relay's: only its end stops a batch being published
	label   string          // p's metrics label

	backoff *backoff.Backoff // the wait between failed transactions
	single  bool             // after a failed publish: send only the failing row until the broker takes it
}

// run publishes the partition until w.ctx ends or a transaction finds the
// lock gone. A batch being published when the partition is given back is
// finished first (its publishing ends only with w.pubCtx or its deadline),
// so a rebalance sends nothing twice. After a failed publish it sends only
// the failing row, waiting PollInterval doubled up to MaxBackoff between
// attempts; after a success it goes on at once while batches come back
// full, else waits for a NOTIFY or PollInterval.
func (w *worker) run() {
	defer func() { _ = w.pub.Close() }()
	defer w.r.clearState(w.p)
	for {
		limit, batches := w.r.cfg.BatchSize, batchesPerTx
		if w.single {
			limit, batches = 1, 1
		}
		t, err := w.transaction(limit, batches)
		if w.ctx.Err() != nil {
			return
		}
		wait, delay := w.p.wake, w.r.cfg.PollInterval
		switch {
		case errors.Is(err, errLockLost):
			w.r.logger.WarnContext(w.ctx, "outbox relay: partition lock lost", slog.Int("partition", w.p.n))
			return
		case errors.Is(err, errPartitionBusy):
			w.r.logger.DebugContext(w.ctx, "outbox relay waits for a former leader's batch to end", slog.Int("partition", w.p.n))
		case err != nil:
			if t.pubErr != nil {
				w.r.m.partFailures.WithLabelValues(w.label).Inc()
				w.single = true
			}
			w.r.noteFailure(w.ctx, w.p, err, limit)
			wait, delay = nil, w.backoff.NextBackOff() // back off, however busy the outbox is
		default:
			w.r.noteSuccess(w.ctx, w.p)
			w.single = false
			w.backoff.Reset()
			if t.selected == limit {
				continue
			}
		}
		w.sleep(wait, delay)
	}
}

// sleep waits for a wake-up on wait (nil: none), delay or the end of w.ctx.
func (w *worker) sleep(wait <-chan struct{}, delay time.Duration) {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-wait:
	case <-t.C:
	case <-w.ctx.Done():
	}
}

// setBusy records the start of the batch being published (zero: none), for Ready.
func (w *worker) setBusy(since time.Time) {
	w.r.mu.Lock()
	w.p.busySince = since
	w.r.mu.Unlock()
}

// clearState forgets p's busy and failing state once its worker ends.
func (r *Relay) clearState(p *partition) {
	r.mu.Lock()
	p.busySince, p.failingSince, p.lastFailure = time.Time{}, time.Time{}, nil
	r.mu.Unlock()
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

// newWorker returns the worker of partition p, led through lockPID's session.
func (r *Relay) newWorker(relayCtx, ctx context.Context, p *partition, lockPID uint32) *worker {
	return &worker{r: r, p: p, pub: r.newPublisher(), lockPID: lockPID, ctx: ctx, pubCtx: relayCtx,
		label: strconv.Itoa(p.n), backoff: backoff.New(r.cfg.PollInterval, r.cfg.MaxBackoff)}
}
