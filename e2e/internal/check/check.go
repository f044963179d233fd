// Package check reads the three databases of the shop and verifies the
// end-to-end invariants that the outbox, the relay and the inboxes promise
// together; the end-to-end suite and the demo use the same checks.
package check

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
)

// DBs are open pools on the order, stock and shipping databases.
type DBs struct {
	Order    *pgxpool.Pool
	Stock    *pgxpool.Pool
	Shipping *pgxpool.Pool
}

// Close closes the pools that are set.
func (d DBs) Close() {
	for _, p := range []*pgxpool.Pool{d.Order, d.Stock, d.Shipping} {
		if p != nil {
			p.Close()
		}
	}
}

// service returns the pool of the registry's service name, nil for another name.
func (d DBs) service(name string) *pgxpool.Pool {
	return map[string]*pgxpool.Pool{contracts.ProducerOrder: d.Order, contracts.ConsumerStock: d.Stock,
		contracts.ConsumerShipping: d.Shipping}[name]
}

// Open connects to the three databases; on error it closes what it opened.
func Open(ctx context.Context, orderURL, stockURL, shippingURL string) (DBs, error) {
	var d DBs
	var err error
	if d.Order, err = pgxpool.New(ctx, orderURL); err != nil {
		return DBs{}, fmt.Errorf("open order db: %w", err)
	}
	if d.Stock, err = pgxpool.New(ctx, stockURL); err != nil {
		d.Close()
		return DBs{}, fmt.Errorf("open stock db: %w", err)
	}
	if d.Shipping, err = pgxpool.New(ctx, shippingURL); err != nil {
		d.Close()
		return DBs{}, fmt.Errorf("open shipping db: %w", err)
	}
	return d, nil
}

// Report is what one pass over the databases found: the counts and every
// broken invariant.
type Report struct {
	Orders            map[string]int // orders by status: draft, placed, confirmed, rejected, cancelled
	OutboxEvents      int            // rows in the producers' outboxes
	OutboxPublished   int            // outbox rows with published_at set
	ReservedLines     int            // reservation rows held in stock
	StockProcessed    int            // stock's processed_event keys
	ShippingProcessed int            // shipping's processed_event keys
	OrderProcessed    int            // order's processed_event keys of stock's answers
	OrderStatuses     int            // shipping's order_status rows
	Shipments         map[string]int // shipping's shipments by status
	Lost              int            // outbox events missing from a consumer's processed_event (counted once per consumer)
	DoubleReserved    int            // order lines reserved more than once
	Problems          []string       // broken invariants, one line each (capped at MaxProblems)
	MoreProblems      int            // problems beyond MaxProblems
}

// MaxProblems caps Report.Problems so that a wholly broken run stays readable.
const MaxProblems = 50

// OK reports whether every invariant holds.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// String lists the problems, one per line, or "all invariants hold".
func (r Report) String() string {
	if r.OK() {
		return "all invariants hold"
	}
	s := strings.Join(r.Problems, "\n")
	if r.MoreProblems > 0 {
		s += fmt.Sprintf("\n... and %d more", r.MoreProblems)
	}
	return s
}

func (r *Report) problem(format string, args ...any) {
	if len(r.Problems) >= MaxProblems {
		r.MoreProblems++
		return
	}
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Eventually runs Invariants every 200 ms until they hold or timeout passes,
// and returns the last report. The error is non-nil only when a database
// cannot be read (or ctx ends); a report whose invariants still fail at the
// deadline comes back with a nil error and OK() false.
func Eventually(ctx context.Context, d DBs, timeout time.Duration) (Report, error) {
	deadline := time.Now().Add(timeout)
	for {
		r, err := Invariants(ctx, d)
		if err == nil && r.OK() {
			return r, nil
		}
		if time.Now().After(deadline) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type order struct {
	status  string
	version int
	lines   map[string]string // product_id -> quantity, trailing zeros trimmed
	events  int               // outbox rows about this order
}

type shipState struct {
	status   string
	version  int
	shipment string // "" when none
}

// Invariants reads the three databases once and checks, for every order:
//
//   - a draft order has no outbox event, no reservation and no shipping row;
//   - a placed or confirmed order has exactly its lines reserved, each once,
//     with the ordered quantity;
//   - a cancelled or rejected order holds no reservation;
//   - an order with at least one event is known to shipping with the
//     order's own status and version (docs/architecture.md, rule 4), and its shipment
//     follows the status (placed -> pending, confirmed -> ready, rejected and
//     cancelled -> cancelled);
//
// and, over all events of every producer's outbox: every outbox row is
// published (rule 2), and every event's id is a processed_event key of each
// consumer that receives it (contracts.ConsumersOf), with no key of a consumer
// that matches no event (rule 3); reservations and shipping rows of unknown
// orders are reported too.
//
// Run it when the system is quiet (no request in flight and the queues
// drained), or through Eventually. It returns an error only when a query fails.
func Invariants(ctx context.Context, d DBs) (Report, error) {
	r := Report{Orders: map[string]int{}, Shipments: map[string]int{}}

	orders := map[string]*order{}
	rows, err := d.Order.Query(ctx, `SELECT id::text, status, version FROM orders`)
	if err != nil {
		return r, fmt.Errorf("read orders: %w", err)
	}
	for rows.Next() {
		var id string
		o := &order{lines: map[string]string{}}
		if err := rows.Scan(&id, &o.status, &o.version); err != nil {
			return r, fmt.Errorf("read orders: %w", err)
		}
		orders[id] = o
		r.Orders[o.status]++
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("read orders: %w", err)
	}

	rows, err = d.Order.Query(ctx, `SELECT order_id::text, product_id::text, trim_scale(quantity)::text FROM order_line`)
	if err != nil {
		return r, fmt.Errorf("read order lines: %w", err)
	}
	for rows.Next() {
		var oid, pid, qty string
		if err := rows.Scan(&oid, &pid, &qty); err != nil {
			return r, fmt.Errorf("read order lines: %w", err)
		}
		if o := orders[oid]; o != nil {
			o.lines[pid] = qty
		}
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("read order lines: %w", err)
	}

	events := map[string]string{} // event id -> event name, of every producer's outbox
	for _, p := range contracts.Producers() {
		if err := readOutbox(ctx, &r, p.Name, d.service(p.Name), orders, events); err != nil {
			return r, err
		}
	}

	// Reservations held in stock: order -> product -> quantities (one per row).
	held := map[string]map[string][]string{}
	rows, err = d.Stock.Query(ctx, reservationsQuery)
	if err != nil {
		return r, fmt.Errorf("read reservations: %w", err)
	}
	for rows.Next() {
		var oid, pid, qty string
		if err := rows.Scan(&oid, &pid, &qty); err != nil {
			return r, fmt.Errorf("read reservations: %w", err)
		}
		r.ReservedLines++
		if held[oid] == nil {
			held[oid] = map[string][]string{}
		}
		held[oid][pid] = append(held[oid][pid], qty)
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("read reservations: %w", err)
	}

	ship := map[string]*shipState{}
	rows, err = d.Shipping.Query(ctx, `SELECT s.order_id::text, s.status, s.version, coalesce(sh.status, '')
FROM order_status s LEFT JOIN shipment sh ON sh.order_id = s.order_id`)
	if err != nil {
		return r, fmt.Errorf("read order_status: %w", err)
	}
	for rows.Next() {
		var oid string
		s := &shipState{}
		if err := rows.Scan(&oid, &s.status, &s.version, &s.shipment); err != nil {
			return r, fmt.Errorf("read order_status: %w", err)
		}
		ship[oid] = s
		r.OrderStatuses++
		if s.shipment != "" {
			r.Shipments[s.shipment]++
		}
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("read order_status: %w", err)
	}

	ids := make([]string, 0, len(orders))
	for id := range orders {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		o := orders[id]
		checkOrder(&r, id, o, held[id], ship[id])
	}
	for oid := range held {
		if orders[oid] == nil {
			r.problem("stock holds reservations of unknown order %s", oid)
		}
	}
	for oid := range ship {
		if orders[oid] == nil {
			r.problem("shipping knows unknown order %s", oid)
		}
	}

	received := map[string]map[string]bool{} // consumer -> the event ids it must hold
	for _, c := range contracts.Consumers() {
		received[c.Name] = map[string]bool{}
	}
	for id, name := range events {
		for _, c := range contracts.ConsumersOf(name) {
			received[c.Name][id] = true
		}
	}
	counts := map[string]*int{contracts.ConsumerStock: &r.StockProcessed, contracts.ConsumerShipping: &r.ShippingProcessed,
		contracts.ConsumerOrder: &r.OrderProcessed}
	for _, c := range contracts.Consumers() {
		if err := checkKeys(ctx, &r, c.Name, d.service(c.Name), received[c.Name], counts[c.Name]); err != nil {
			return r, err
		}
	}
	return r, nil
}

// readOutbox reads the outbox of producer's database: it adds each event to
// events, counts it on its order (order's events only: o.events), and reports an
// unpublished row or one about an unknown order.
func readOutbox(ctx context.Context, r *Report, producer string, pool *pgxpool.Pool, orders map[string]*order, events map[string]string) error {
	rows, err := pool.Query(ctx, `SELECT id::text, event_name, envelope->'payload'->>'order_id', published_at IS NOT NULL FROM outbox`)
	if err != nil {
		return fmt.Errorf("read %s outbox: %w", producer, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, name, oid string
		var published bool
		if err := rows.Scan(&id, &name, &oid, &published); err != nil {
			return fmt.Errorf("read %s outbox: %w", producer, err)
		}
		events[id] = name
		r.OutboxEvents++
		if published {
			r.OutboxPublished++
		} else {
			r.problem("%s outbox event %s (order %s) is not published", producer, id, oid)
		}
		switch o := orders[oid]; {
		case o == nil:
			r.problem("%s outbox event %s names unknown order %s", producer, id, oid)
		case producer == contracts.ProducerOrder:
			o.events++
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s outbox: %w", producer, err)
	}
	return nil
}

// reservationsQuery lists the reservation rows stock holds (released ones are
// left out), one row per reserved line: order id, product id, quantity with
// trailing zeros trimmed.
const reservationsQuery = `SELECT order_id::text, product_id::text, trim_scale(quantity)::text FROM reservation WHERE status = 'held'`

func checkOrder(r *Report, id string, o *order, held map[string][]string, s *shipState) {
	switch o.status {
	case "draft":
		if o.events > 0 {
			r.problem("draft order %s has %d outbox events", id, o.events)
		}
		if len(held) > 0 {
			r.problem("draft order %s holds reservations %v", id, held)
		}
	case "placed", "confirmed": // untracked products: stock holds every line
		for pid, qty := range o.lines {
			got := held[pid]
			switch {
			case len(got) == 0:
				r.problem("placed order %s: line %s (%s) is not reserved", id, pid, qty)
			case len(got) > 1:
				r.DoubleReserved++
				r.problem("placed order %s: line %s reserved %d times %v", id, pid, len(got), got)
			case got[0] != qty:
				r.problem("placed order %s: line %s reserved %s, ordered %s", id, pid, got[0], qty)
			}
		}
		for pid, got := range held {
			if _, ok := o.lines[pid]; !ok {
				r.problem("placed order %s: product %s reserved %v but not ordered", id, pid, got)
			}
		}
	case "cancelled", "rejected":
		if len(held) > 0 {
			r.problem("%s order %s still holds reservations %v", o.status, id, held)
		}
	default:
		r.problem("order %s has unknown status %q", id, o.status)
	}

	if o.events == 0 {
		if s != nil {
			r.problem("order %s has no event but shipping knows it (%s v%d)", id, s.status, s.version)
		}
		return
	}
	if s == nil {
		r.problem("order %s (%s v%d) is unknown to shipping", id, o.status, o.version)
		return
	}
	if s.status != o.status || s.version != o.version {
		r.problem("order %s is %s v%d but shipping has %s v%d", id, o.status, o.version, s.status, s.version)
	}
	want := map[string]string{"placed": "pending", "confirmed": "ready", "rejected": "cancelled", "cancelled": "cancelled"}[o.status]
	if want != "" && s.shipment != want {
		r.problem("order %s is %s but its shipment is %q, want %q", id, o.status, s.shipment, want)
	}
}

// checkKeys compares consumer name's processed_event keys with the events it
// receives (other consumers' keys in its database, such as order's
// Idempotency-Keys, are left out).
func checkKeys(ctx context.Context, r *Report, name string, pool *pgxpool.Pool, events map[string]bool, count *int) error {
	rows, err := pool.Query(ctx, `SELECT message_key FROM processed_event WHERE consumer = $1`, name)
	if err != nil {
		return fmt.Errorf("read %s processed_event: %w", name, err)
	}
	keys := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("read %s processed_event: %w", name, err)
		}
		keys[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s processed_event: %w", name, err)
	}
	*count = len(keys)
	for id := range events {
		if !keys[id] {
			r.Lost++
			r.problem("event %s never processed by %s", id, name)
		}
	}
	for id := range keys {
		if !events[id] {
			r.problem("%s processed event %s that the outbox does not hold", name, id)
		}
	}
	return nil
}

// DeadLetters are the consumers' open dead letters: dead_letter records nobody has
// replayed or dropped yet. The record, not the dead-letter queue, is the truth: a
// purged queue empties no record.
type DeadLetters struct {
	// Open counts each consumer's open dead letters (distinct message keys), by
	// consumer name ("stock", "shipping", "order"): poison messages included.
	Open map[string]int
	// Events counts, per consumer, the outbox events among them: not delivered,
	// awaiting a decision (counted in Report.Lost too).
	Events map[string]int
}

// Total is the number of open dead letters of every consumer.
func (d DeadLetters) Total() int {
	n := 0
	for _, v := range d.Open {
		n += v
	}
	return n
}

// OpenDeadLetters reads the open dead letters of every consumer of the registry,
// and which of them are events of a producer's outbox.
func OpenDeadLetters(ctx context.Context, d DBs) (DeadLetters, error) {
	out := DeadLetters{Open: map[string]int{}, Events: map[string]int{}}
	for _, c := range contracts.Consumers() {
		name, pool := c.Name, d.service(c.Name)
		var open int
		var ids []string
		err := pool.QueryRow(ctx, `SELECT count(DISTINCT message_key), COALESCE(array_agg(DISTINCT event_id::text) FILTER (WHERE event_id IS NOT NULL), '{}')
FROM dead_letter WHERE consumer = $1 AND resolved_at IS NULL`, name).Scan(&open, &ids)
		if err != nil {
			return out, fmt.Errorf("read %s dead letters: %w", name, err)
		}
		out.Open[name] = open
		for _, p := range contracts.Producers() {
			var events int
			if err := d.service(p.Name).QueryRow(ctx, `SELECT count(*) FROM outbox WHERE id = ANY($1::uuid[])`, ids).Scan(&events); err != nil {
				return out, fmt.Errorf("match %s dead letters with %s's outbox: %w", name, p.Name, err)
			}
			out.Events[name] += events
		}
	}
	return out, nil
}
