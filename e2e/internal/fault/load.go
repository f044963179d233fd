package fault

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"example.com/shop/e2e/internal/system"
)

// Load is a running load driver: clients that each create a draft order of
// two lines and place it, again and again. A failed request is retried
// (the place on the same order, until 200, or 409 after an earlier attempt
// that may have committed); the driver never gives up on an order while it
// runs, so an outage slows it down but never loses an order from its count.
// Only an order that is gone when placed (404: a failover erased its creation)
// is counted as vanished and left.
type Load struct {
	rig    *Rig
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errors atomic.Int64
	limit  int64
	issued atomic.Int64
}

// StartLoad starts clients concurrent clients, each pausing pause between
// orders, until Stop or until limit orders were issued (0: no limit).
func (r *Rig) StartLoad(ctx context.Context, clients int, pause time.Duration, limit int) *Load {
	ctx, cancel := context.WithCancel(ctx)
	l := &Load{rig: r, cancel: cancel, limit: int64(limit)}
	for range clients {
		l.wg.Go(func() { l.client(ctx, pause) })
	}
	return l
}

func (l *Load) client(ctx context.Context, pause time.Duration) {
	for ctx.Err() == nil {
		if l.limit > 0 && l.issued.Add(1) > l.limit {
			return
		}
		var o system.Order
		for {
			var err error
			if o, err = l.rig.API.CreateOrder(ctx, uuid.NewString(), lines()); err == nil {
				break
			}
			if !l.retry(ctx) {
				return
			}
		}
		for tried := false; ; tried = true {
			st, err := l.rig.API.Place(ctx, o.ID)
			if err == nil && (st == http.StatusOK || (tried && st == http.StatusConflict)) {
				l.rig.NotePlaced(o.ID)
				break
			}
			if err == nil && st == http.StatusNotFound {
				l.rig.NoteVanished() // its creation was acknowledged, then lost (a failover)
				break
			}
			if !l.retry(ctx) {
				return
			}
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
		}
	}
}

// retry counts a failed request and waits 200 ms; false when ctx ended.
func (l *Load) retry(ctx context.Context) bool {
	l.errors.Add(1)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(200 * time.Millisecond):
		return true
	}
}

// Wait waits until the driver issued all of its limit orders.
func (l *Load) Wait() { l.wg.Wait() }

// Stop ends the clients and waits for them. An order being placed when Stop
// comes may stay a draft.
func (l *Load) Stop() {
	l.cancel()
	l.wg.Wait()
}

// Errors returns the requests that failed (and were retried).
func (l *Load) Errors() int { return int(l.errors.Load()) }

// NotePlaced counts order id as placed, for a load driver of the caller's
// own: Placed, MissingPlaced and the stall watch count it.
func (r *Rig) NotePlaced(id string) {
	r.placed.Add(1)
	r.mu.Lock()
	r.placedIDs = append(r.placedIDs, id)
	r.mu.Unlock()
}

// NoteVanished counts an order whose creation was acknowledged and that was
// gone when placed (Vanished).
func (r *Rig) NoteVanished() { r.vanished.Add(1) }

// Placed returns the orders the driver saw placed so far.
func (r *Rig) Placed() int { return int(r.placed.Load()) }

// Vanished returns the orders whose creation the driver saw acknowledged and
// that were gone when it placed them (erased by a database failover).
func (r *Rig) Vanished() int { return int(r.vanished.Load()) }

// MissingPlaced returns the ids of the orders the driver saw placed that the
// order database does not hold as placed (or further) now: acknowledged
// commits a failover lost.
func (r *Rig) MissingPlaced(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	ids := slices.Clone(r.placedIDs)
	r.mu.Unlock()
	rows, err := r.DBs.Order.Query(ctx, `SELECT id::text FROM orders WHERE id = ANY($1::uuid[]) AND status <> 'draft'`, ids)
	if err != nil {
		return nil, fmt.Errorf("placed orders: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("placed orders: %w", err)
	}
	var missing []string
	for _, id := range ids {
		if !slices.Contains(found, id) {
			missing = append(missing, id)
		}
	}
	return missing, nil
}

// WaitPlaced waits until the driver saw n orders placed in all, or timeout.
func (r *Rig) WaitPlaced(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for r.Placed() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d orders placed within %s", r.Placed(), n, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func lines() []system.Line {
	return []system.Line{
		{ProductID: uuid.NewString(), Quantity: "1.500"},
		{ProductID: uuid.NewString(), Quantity: "2"},
	}
}

// watch samples every 250 ms how many events stock has processed; while
// fewer than the placed orders are processed and the count does not move,
// the system stalls. The longest stall is kept for the next ledger.
func (r *Rig) watch(ctx context.Context) {
	defer close(r.watchDone)
	last, lastMove := -1, time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		var n int
		err := r.DBs.Stock.QueryRow(qctx, `SELECT count(*) FROM processed_event`).Scan(&n)
		cancel()
		now := time.Now()
		if err == nil && (n != last || n >= r.Placed()) {
			last, lastMove = n, now
		}
		r.mu.Lock()
		if d := now.Sub(lastMove); d > r.stall {
			r.stall = d
		}
		r.mu.Unlock()
	}
}

// takeStall returns the longest stall since the last call and starts over.
func (r *Rig) takeStall() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.stall
	r.stall = 0
	return d
}
