package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"example.com/shop/contracts"
	"example.com/shop/platform/pg"
)

// Option configures an Inbox in New.
type Option func(*Inbox)

// WithGroupCommit lets events that arrive while another transaction is committing share
// one transaction, so one WAL flush (fsync) commits up to maxBatch events. At most
// maxTx such transactions run at once; an event waits for a free one rather than
// opening its own. Values below 1 are taken as 1; maxBatch 1 turns grouping off.
//
// Each event still follows DESIGN.md rule 3: its key and its handlers' effects are in
// the same transaction, and Process returns only after that transaction committed.
// Within a group, keys are inserted in event_id order (so groups never deadlock on each
// other's keys), then the handlers of each new event run. When a handler fails, the
// group is rolled back: that event gets the handler's error (and is retried by the
// runtime), the others are processed again, each in a transaction of its own. Any
// other failure of the group (a deadlock or serialization failure, even one a handler
// reported, a lost connection) has them all processed again one by one. A copy of an event that appears twice in one group is a duplicate
// of the first.
//
// Group commit pays off when many deliveries are handled at once (consumer workers well
// above maxTx) and the disk's flush dominates the cost of an event.
func WithGroupCommit(maxBatch, maxTx int) Option {
	return func(i *Inbox) {
		if maxBatch <= 1 {
			i.batch = nil
			return
		}
		i.batch = &batcher{inbox: i, maxBatch: maxBatch, maxTx: max(maxTx, 1)}
	}
}

// batcher groups concurrent Process calls: a caller that finds fewer than maxTx groups
// in flight leads one, committing everything pending in groups of up to maxBatch until
// its own event is done; it then passes the lead to a waiting caller, if any.
type batcher struct {
	inbox    *Inbox
	maxBatch int
	maxTx    int

	mu      sync.Mutex
	pending []*request
	leaders int
}

type request struct {
	env      contracts.Envelope
	handlers []Handler
	done     chan struct{} // closed when dup and err are set
	lead     chan struct{} // receives the lead (buffered 1)
	led      bool          // the lead was given to it; guarded by batcher.mu
	dup      bool
	err      error
}

func (r *request) finish(dup bool, err error) {
	r.dup, r.err = dup, err
	close(r.done)
}

func (r *request) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (b *batcher) submit(ctx context.Context, env contracts.Envelope, handlers []Handler) (bool, error) {
	r := &request{env: env, handlers: handlers, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, r)
	lead := b.leaders < b.maxTx
	if lead {
		b.leaders++
		r.led = true
	}
	b.mu.Unlock()
	for {
		if lead {
			b.leadUntilDone(ctx, r)
			lead = false
		}
		// A request is never abandoned once queued: its group may be committing.
		select {
		case <-r.done:
			// The lead may have been handed over before another leader took r into
			// its group; pass it on rather than lose it.
			select {
			case <-r.lead:
				b.leadUntilDone(ctx, r)
			default:
			}
			return r.dup, r.err
		case <-r.lead:
			lead = true
		}
	}
}

// leadUntilDone commits groups of pending requests until me is done, then hands the
// lead to the oldest pending request or gives it up when none is pending.
func (b *batcher) leadUntilDone(ctx context.Context, me *request) {
	for {
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.leaders--
			b.mu.Unlock()
			return
		}
		if me.finished() {
			b.handOff()
			b.mu.Unlock()
			return
		}
		n := min(len(b.pending), b.maxBatch)
		group := slices.Clone(b.pending[:n])
		b.pending = slices.Delete(b.pending, 0, n)
		b.mu.Unlock()
		b.commit(ctx, group)
	}
}

// handOff gives the lead to the oldest pending request that has not been given it,
// or gives it up when every pending request already has a leader coming. b.mu is held.
func (b *batcher) handOff() {
	for _, r := range b.pending {
		if !r.led {
			r.led = true
			r.lead <- struct{}{}
			return
		}
	}
	b.leaders--
}

// errGroupFailed stops a group whose failure is attributed to one request.
var errGroupFailed = errors.New("group member failed")

// commit processes group in one transaction, falling back to one transaction per
// request when the group fails.
func (b *batcher) commit(ctx context.Context, group []*request) {
	i := b.inbox
	if len(group) == 1 {
		r := group[0]
		r.finish(i.processOne(ctx, r.env, r.handlers))
		return
	}
	ids := make([]uuid.UUID, 0, len(group))
	for _, r := range group {
		ids = append(ids, r.env.EventID)
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	ids = slices.Compact(ids)

	dup := make([]bool, len(group))
	failed, failedErr := -1, error(nil)
	start := time.Now()
	err := pg.WithTx(ctx, i.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, insertKeys, i.consumer, ids)
		if err != nil {
			return fmt.Errorf("record keys: %w", err)
		}
		inserted, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return fmt.Errorf("record keys: %w", err)
		}
		fresh := make(map[uuid.UUID]bool, len(inserted))
		for _, id := range inserted {
			fresh[id] = true
		}
		for n, r := range group {
			if !fresh[r.env.EventID] {
				dup[n] = true
				continue
			}
			delete(fresh, r.env.EventID) // a later copy in this group is a duplicate
			if err := runHandlers(ctx, tx, r.env, r.handlers); err != nil {
				if isContention(err) {
					return err // the group's own conflict: every member is redone alone
				}
				failed, failedErr = n, err
				return errGroupFailed
			}
		}
		return nil
	})
	elapsed := time.Since(start)
	if err == nil {
		for n, r := range group {
			r.finish(i.record(r.env, dup[n], nil, elapsed))
		}
		return
	}
	for n, r := range group {
		if n == failed && errors.Is(err, errGroupFailed) {
			r.finish(i.record(r.env, false, failedErr, elapsed))
			continue
		}
		r.finish(i.processOne(ctx, r.env, r.handlers))
	}
}

// isContention reports whether err is PostgreSQL giving up on the transaction
// because of concurrent ones (deadlock_detected 40P01, serialization_failure 40001).
// Handlers of different events in one group lock rows in the group's order, which
// another group may take in the opposite order; such a failure belongs to the group,
// not to the event whose handler happened to see it.
func isContention(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// insertKeys is insertKey for a group: sorted ids, so that concurrent groups take the
// key locks in one order and cannot deadlock on them.
const insertKeys = `INSERT INTO processed_event (consumer, event_id, processed_at)
SELECT $1, id, now() FROM unnest($2::uuid[]) AS id ORDER BY id
ON CONFLICT DO NOTHING
RETURNING event_id`
