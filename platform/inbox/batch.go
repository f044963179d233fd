package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"example.com/shop/platform/pg"
)

// Option configures an Inbox in New.
type Option func(*Inbox)

// DefaultTimeout bounds the database work of one delivery in HandleDelivery
// (WithTimeout changes it).
const DefaultTimeout = 10 * time.Second

// WithTimeout bounds the database work of one delivery in HandleDelivery
// (waiting for its group's transaction included) at d (d <= 0: the
// default, DefaultTimeout). A database that does not answer in time is an
// outage, not the event's fault: the delivery wraps amqp.ErrUnavailable, the
// consumer pauses, and the delivery is handled again later.
func WithTimeout(d time.Duration) Option {
	return func(i *Inbox) {
		if d > 0 {
			i.timeout = d
		}
	}
}

// WithGroupCommit lets events that arrive while another transaction is committing share
// one transaction, so one WAL flush (fsync) commits up to maxBatch events. At most
// maxTx such transactions run at once; an event waits for a free one rather than
// opening its own. Values below 1 are taken as 1; maxBatch 1 turns grouping off.
//
// It is an option around the rule, not another rule: each event still follows
// docs/architecture.md, rule 3, as the one-event path (processOne) runs it: its key
// and its handlers' effects are in the same transaction, and Process returns only
// after that transaction committed. A group of one, and every member of a group
// that fails as a whole, goes through processOne itself.
// Within a group, keys are inserted in key order (so groups never deadlock on each
// other's keys), then the Handlers of each new event run in the group's order, and
// each GroupHandler once, with the new events of its name (OnGroup). When one
// event fails (a Handler's error, a GroupHandler's EventFailed, or a GroupHandler's
// error for a single event), the group is rolled back: that event gets the error
// (and is retried by the runtime), the others are committed again as a group
// without it. Any other failure of the group (a deadlock or serialization failure,
// even one a handler reported, a lost connection, a GroupHandler's error for
// several events) has them all processed again one by one. A copy of an event
// that appears twice in one group is a duplicate of the first (or a conflict, when
// its content differs). Counters and content checks are those of Consumer.Handle.
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
	span  trace.Span // the event's inbox span, parent of its handlers' spans
	event *event
	route *route
	done  chan struct{} // closed when dup and err are set
	lead  chan struct{} // receives the lead (buffered 1)
	led   bool          // the lead was given to it; guarded by batcher.mu
	dup   bool
	err   error
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

func (b *batcher) submit(ctx context.Context, e *event, rt *route) (bool, error) {
	r := &request{span: trace.SpanFromContext(ctx), event: e, route: rt, done: make(chan struct{}), lead: make(chan struct{}, 1)}
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

// commit processes group in one transaction, falling back to one transaction per
// request when the group fails.
func (b *batcher) commit(ctx context.Context, group []*request) {
	i := b.inbox
	if len(group) == 1 {
		r := group[0]
		r.finish(i.processOne(trace.ContextWithSpan(ctx, r.span), r.event, r.route))
		return
	}
	g := newGroupTx(i, group)
	timer := prometheus.NewTimer(i.consumer.metrics.duration)
	err := pg.WithTx(ctx, i.pool, func(tx pgx.Tx) error { return g.run(ctx, tx) })
	timer.ObserveDuration()
	switch {
	case err == nil:
		for n, r := range group {
			r.finish(i.record(r.event.key, g.outcome[n]))
		}
	case g.failed >= 0 && !isContention(g.failedErr):
		// One member failed: it gets its error, the others are committed again
		// without it (a smaller group, which may fail again and shrink once more).
		r := group[g.failed]
		r.finish(i.record(r.event.key, g.failedErr))
		b.commit(ctx, slices.Delete(slices.Clone(group), g.failed, g.failed+1))
	default:
		for _, r := range group {
			r.finish(i.processOne(trace.ContextWithSpan(ctx, r.span), r.event, r.route))
		}
	}
}

// groupTx is one attempt to commit a group in one transaction: its keys, then the
// handlers of its new events. It records each member's outcome and which member,
// if any, failed the transaction.
type groupTx struct {
	inbox *Inbox
	group []*request
	keys  []string          // the distinct keys, in key order (the lock order)
	sums  map[string][]byte // each key's content hash, the first copy's

	outcome   []error // per member: nil, errDup or a *ConflictError
	failed    int     // the member whose handler failed the transaction, or -1
	failedErr error
}

func newGroupTx(i *Inbox, group []*request) *groupTx {
	g := &groupTx{inbox: i, group: group, sums: make(map[string][]byte, len(group)),
		outcome: make([]error, len(group)), failed: -1}
	for _, r := range group {
		if _, ok := g.sums[r.event.key]; !ok {
			g.sums[r.event.key] = r.event.sum
			g.keys = append(g.keys, r.event.key)
		}
	}
	slices.Sort(g.keys)
	return g
}

// fail records that member n failed the transaction with err, and returns err.
func (g *groupTx) fail(n int, err error) error {
	g.failed, g.failedErr = n, err
	return err
}

// run inserts the group's keys, sorts out its duplicates and conflicts, then runs
// the Handlers of each new event in the group's order and each GroupHandler once.
func (g *groupTx) run(ctx context.Context, tx pgx.Tx) error {
	fresh, stored, err := g.recordKeys(ctx, tx)
	if err != nil {
		return err
	}
	c := g.inbox.consumer
	var sets []*groupSet // the new events of each GroupHandler, in order of first appearance
	for n, r := range g.group {
		e := r.event
		if !fresh[e.key] {
			// A key stored before, or by an earlier copy in this group.
			prev, ok := stored[e.key]
			if !ok {
				prev = g.sums[e.key]
			}
			if prev != nil && !bytes.Equal(prev, e.sum) {
				g.outcome[n] = c.conflict(ctx, e.key, prev, e.sum)
			} else {
				g.outcome[n] = errDup
			}
			continue
		}
		delete(fresh, e.key) // a later copy in this group is a duplicate
		if r.route.group != nil {
			sets = addToSet(sets, n, r)
			continue
		}
		if err := g.inbox.runHandlers(trace.ContextWithSpan(ctx, r.span), tx, e, r.route); err != nil {
			return g.fail(n, err)
		}
	}
	for _, set := range sets {
		if err := g.runSet(ctx, tx, set); err != nil {
			return err
		}
	}
	return nil
}

// recordKeys inserts the group's keys and returns those it inserted (fresh) and
// the content hashes stored before for the others.
func (g *groupTx) recordKeys(ctx context.Context, tx pgx.Tx) (fresh map[string]bool, stored map[string][]byte, err error) {
	hashes := make([][]byte, len(g.keys))
	for n, k := range g.keys {
		hashes[n] = g.sums[k]
	}
	rows, err := tx.Query(ctx, insertKeys, g.inbox.consumer.name, g.keys, hashes)
	if err != nil {
		return nil, nil, fmt.Errorf("record keys: %w", err)
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("record keys: %w", err)
	}
	fresh = make(map[string]bool, len(inserted))
	for _, k := range inserted {
		fresh[k] = true
	}
	stored, err = storedHashes(ctx, tx, g.inbox.consumer.name, g.keys, fresh)
	return fresh, stored, err
}

// runSet runs one GroupHandler on its new events, then each event's own Handlers,
// attributing a failure to the member it names when it can.
func (g *groupTx) runSet(ctx context.Context, tx pgx.Tx, set *groupSet) error {
	err := g.inbox.runGroup(ctx, tx, set.events, set.spans, set.route)
	var ef *eventFailure
	switch {
	case err == nil:
	case isContention(err):
		return err
	case errors.As(err, &ef):
		return g.fail(set.members[ef.index], ef.err)
	case len(set.members) == 1:
		return g.fail(set.members[0], err)
	default:
		return err // not attributed: every member is redone alone
	}
	for _, n := range set.members {
		r := g.group[n]
		if err := g.inbox.runHandlers(trace.ContextWithSpan(ctx, r.span), tx, r.event, r.route); err != nil {
			return g.fail(n, err)
		}
	}
	return nil
}

// groupSet is the new events of one GroupHandler in a group.
type groupSet struct {
	route   *route
	members []int // indexes in the group
	events  []*event
	spans   []trace.Span
}

// addToSet adds member n, request r, to the set of its route.
func addToSet(sets []*groupSet, n int, r *request) []*groupSet {
	var set *groupSet
	for _, s := range sets {
		if s.route == r.route {
			set = s
			break
		}
	}
	if set == nil {
		set = &groupSet{route: r.route}
		sets = append(sets, set)
	}
	set.members = append(set.members, n)
	set.events = append(set.events, r.event)
	set.spans = append(set.spans, r.span)
	return sets
}

// errDup marks a duplicate member of a committed group.
var errDup = errors.New("duplicate")

// record counts the outcome of one member of a group and returns it as Process
// does: errDup is a duplicate, anything else an error wrapped with the key.
func (i *Inbox) record(key string, err error) (bool, error) {
	dup := errors.Is(err, errDup)
	if dup {
		err = nil
	}
	i.consumer.count(Outcome{Duplicate: dup}, err)
	if err != nil {
		return false, fmt.Errorf("inbox %s: key %q: %w", i.consumer.name, key, err)
	}
	return dup, nil
}

// storedHashes returns the content hashes stored for the keys that are not fresh
// (nil for a key stored without one).
func storedHashes(ctx context.Context, tx pgx.Tx, consumer string, keys []string, fresh map[string]bool) (map[string][]byte, error) {
	old := make([]string, 0, len(keys)-len(fresh))
	for _, k := range keys {
		if !fresh[k] {
			old = append(old, k)
		}
	}
	stored := make(map[string][]byte, len(old))
	if len(old) == 0 {
		return stored, nil
	}
	rows, err := tx.Query(ctx, `SELECT message_key, payload_sha256 FROM processed_event WHERE consumer = $1 AND message_key = ANY($2)`, consumer, old)
	if err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	var (
		k   string
		sum []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&k, &sum}, func() error {
		stored[k] = slices.Clone(sum)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	return stored, nil
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

// insertKeys is insertKey for a group: keys in order, so that concurrent groups take
// the key locks in one order and cannot deadlock on them.
const insertKeys = `INSERT INTO processed_event (consumer, message_key, payload_sha256, processed_at)
SELECT $1, k, s, now() FROM unnest($2::text[], $3::bytea[]) AS t(k, s) ORDER BY k
ON CONFLICT DO NOTHING
RETURNING message_key`
