package fault

import (
	"context"
	"fmt"
	"strings"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/check"
	"example.com/shop/e2e/internal/system"
)

// Ledger is what the three databases, the dead-letter queues and the
// processes show once the system has settled after a fault.
type Ledger struct {
	Report       check.Report   // the whole-system invariants (check.Invariants)
	Placed       int            // orders placed, whatever their status since (order database)
	Confirmed    int            // orders confirmed by stock's answer and not cancelled
	Reserved     int            // orders holding at least one reservation
	Lost         int            // events a consumer never processed, plus outbox rows never published (every producer's)
	Doubled      int            // order lines reserved more than once, plus events a producer wrote twice for one order
	Duplicates   int            // deliveries the inboxes recognised as duplicates since the previous ledger (reported, never a failure)
	DeadLettered map[string]int // messages in each dead-letter queue
	// OpenDeadLetters counts each dead-letter queue's consumer's open dead_letter
	// records (keyed by the queue's name, as DeadLettered): the truth, which a
	// purged queue does not change.
	OpenDeadLetters map[string]int
	// NotDelivered counts the events a consumer dead-lettered that nobody has
	// replayed or dropped: not delivered, awaiting a decision (also in Lost).
	NotDelivered int
	LongestStall time.Duration // longest time processing stood still with events outstanding, since the previous ledger
	NotReady     []string      // processes that exited by themselves or did not answer /readyz 200
}

// Ledger waits (up to settle) until every process answers /readyz 200 and
// the invariants hold, then reads the dead-letter queues and the counters.
// wantDLQ is how many messages each dead-letter queue should hold (nil: none).
// The error is non-nil only when a database or the broker cannot be read.
func (r *Rig) Ledger(ctx context.Context, settle time.Duration, wantDLQ map[string]int) (Ledger, error) {
	var l Ledger
	deadline := time.Now().Add(settle)
	for _, p := range r.Sys.All() {
		if !p.Running() {
			l.NotReady = append(l.NotReady, p.Name+" exited")
			continue
		}
		wctx, cancel := context.WithDeadline(ctx, deadline)
		err := p.WaitReady(wctx)
		cancel()
		if err != nil {
			l.NotReady = append(l.NotReady, p.Name+" not ready: "+firstLine(err.Error()))
		}
	}
	rep, err := check.Eventually(ctx, r.DBs, time.Until(deadline))
	if err != nil {
		return l, err
	}
	l.Report = rep
	l.Placed = rep.Placed()
	l.Confirmed = rep.Orders["confirmed"]
	l.Lost = rep.Lost + rep.OutboxEvents - rep.OutboxPublished
	l.Doubled = rep.DoubleReserved + rep.AppliedTwice
	if err := r.DBs.Stock.QueryRow(ctx, `SELECT count(DISTINCT order_id) FROM reservation WHERE status = 'held'`).Scan(&l.Reserved); err != nil {
		return l, fmt.Errorf("count reserved orders: %w", err)
	}
	// The dead-letter queues should hold what is expected; give a late
	// dead-letter a moment to arrive before reading them for the last time.
	for {
		l.DeadLettered, err = system.QueueDepths(ctx, r.cfg.AMQPURL, deadLetterQueues()...)
		var dead check.DeadLetters
		if err == nil {
			dead, err = check.OpenDeadLetters(ctx, r.DBs)
			l.OpenDeadLetters, l.NotDelivered = map[string]int{}, 0
			for _, c := range contracts.Consumers() {
				l.OpenDeadLetters[c.DeadLetterQueue] = dead.Open[c.Name]
				l.NotDelivered += dead.Events[c.Name]
			}
		}
		if err == nil && dlqAsWanted(l.DeadLettered, wantDLQ) && dlqAsWanted(l.OpenDeadLetters, wantDLQ) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return l, err
	}
	total := r.Duplicates(ctx)
	r.mu.Lock()
	l.Duplicates, r.dupsLedger = total-r.dupsLedger, total
	r.mu.Unlock()
	l.LongestStall = r.takeStall()
	return l, nil
}

// deadLetterQueues are the dead-letter queues of every consumer of the registry.
func deadLetterQueues() []string {
	var qs []string
	for _, c := range contracts.Consumers() {
		qs = append(qs, c.DeadLetterQueue)
	}
	return qs
}

func dlqAsWanted(got, want map[string]int) bool {
	for _, q := range deadLetterQueues() {
		if got[q] != want[q] {
			return false
		}
	}
	return true
}

// Failures lists what is wrong: broken invariants, lost or doubled events, events
// dead-lettered and not delivered, dead-letter queues or open dead_letter records
// other than wantDLQ, processes not ready.
func (l Ledger) Failures(wantDLQ map[string]int) []string {
	var f []string
	if l.Lost > 0 {
		f = append(f, fmt.Sprintf("%d events lost", l.Lost))
	}
	if l.Doubled > 0 {
		f = append(f, fmt.Sprintf("%d lines reserved or events applied twice", l.Doubled))
	}
	if !l.Report.OK() {
		f = append(f, "invariants broken:\n"+l.Report.String())
	}
	if l.NotDelivered > 0 {
		f = append(f, fmt.Sprintf("%d events dead-lettered, not delivered (awaiting a decision)", l.NotDelivered))
	}
	if !dlqAsWanted(l.DeadLettered, wantDLQ) {
		f = append(f, fmt.Sprintf("dead-letter queues hold %v, want %v", l.DeadLettered, wantDLQ))
	}
	if !dlqAsWanted(l.OpenDeadLetters, wantDLQ) {
		f = append(f, fmt.Sprintf("open dead_letter records %v, want %v", l.OpenDeadLetters, wantDLQ))
	}
	for _, n := range l.NotReady {
		f = append(f, n)
	}
	return f
}

// DeadLetters is the number of open dead_letter records of every consumer.
func (l Ledger) DeadLetters() int {
	n := 0
	for _, v := range l.OpenDeadLetters {
		n += v
	}
	return n
}

// String is the ledger's summary line.
func (l Ledger) String() string {
	return fmt.Sprintf("placed=%d confirmed=%d reserved=%d lost=%d doubled=%d duplicates=%d dead-lettered=%d not-delivered=%d longest-stall=%s not-ready=%d",
		l.Placed, l.Confirmed, l.Reserved, l.Lost, l.Doubled, l.Duplicates, l.DeadLetters(), l.NotDelivered,
		l.LongestStall.Round(10*time.Millisecond), len(l.NotReady))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
