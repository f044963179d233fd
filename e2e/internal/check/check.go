// Package check reads the databases of the shop and verifies the end-to-end
// invariants that the outboxes, the relays and the inboxes promise together, on
// both legs of an order (order's events out, stock's answers back); the
// end-to-end suite, the fault suite and the demo use the same checks. Which
// producer writes which events and which consumer must process them comes from
// the registry (contracts.Producers, contracts.Consumers).
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

// DBs are open pools on the order, stock and shipping databases, and on the
// database of every other service of the registry (OpenAll).
type DBs struct {
	Order    *pgxpool.Pool
	Stock    *pgxpool.Pool
	Shipping *pgxpool.Pool
	// Added holds the pools of the registry's services besides order, stock and
	// shipping, by service name (contracts.Services); nil after Open.
	Added map[string]*pgxpool.Pool
}

// Close closes the pools that are set.
func (d DBs) Close() {
	for _, p := range []*pgxpool.Pool{d.Order, d.Stock, d.Shipping} {
		if p != nil {
			p.Close()
		}
	}
	for _, p := range d.Added {
		p.Close()
	}
}

// Of returns the pool on the database of service, a service of the registry
// (contracts.Services), and an error for a service DBs holds no pool for (Open
// opens order's, stock's and shipping's; OpenAll every service's).
func (d DBs) Of(service string) (*pgxpool.Pool, error) {
	p := map[string]*pgxpool.Pool{
		contracts.ProducerOrder:    d.Order,
		contracts.ConsumerStock:    d.Stock,
		contracts.ConsumerShipping: d.Shipping,
	}[service]
	if p == nil {
		p = d.Added[service]
	}
	if p == nil {
		return nil, fmt.Errorf("check: no database pool for service %q of the registry", service)
	}
	return p, nil
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

// OpenAll connects to the database of every service of the registry, urls
// holding each one's URL by service name. It fails, closing what it opened, when
// a URL is missing or a pool cannot be made.
func OpenAll(ctx context.Context, urls map[string]string) (DBs, error) {
	for _, s := range contracts.Services() {
		if urls[s.Name] == "" {
			return DBs{}, fmt.Errorf("check: no database URL for service %q of the registry", s.Name)
		}
	}
	d, err := Open(ctx, urls[contracts.ProducerOrder], urls[contracts.ConsumerStock], urls[contracts.ConsumerShipping])
	if err != nil {
		return DBs{}, err
	}
	d.Added = map[string]*pgxpool.Pool{}
	for _, s := range contracts.Services() {
		if _, err := d.Of(s.Name); err == nil {
			continue
		}
		if d.Added[s.Name], err = pgxpool.New(ctx, urls[s.Name]); err != nil {
			d.Close()
			return DBs{}, fmt.Errorf("open %s db: %w", s.Name, err)
		}
	}
	return d, nil
}

// Report is what one pass over the databases found: the counts and every
// broken invariant.
type Report struct {
	Orders          map[string]int // orders by status: draft, placed, confirmed, rejected, cancelled
	Rejections      map[string]int // rejected orders by the rejection's reason
	OutboxEvents    int            // rows in every producer's outbox
	OutboxPublished int            // those rows with published_at set
	Events          map[string]int // outbox rows by event name, every producer's
	ReservedLines   int            // reservation rows held in stock
	Products        int            // tracked products (product_stock rows)
	Processed       map[string]int // processed_event keys by consumer name (contracts.Consumers)
	OrderStatuses   int            // shipping's order_status rows
	Shipments       map[string]int // shipping's shipments by status
	Lost            int            // outbox events missing from a receiving consumer's processed_event (counted once per consumer)
	DoubleReserved  int            // order lines reserved more than once
	AppliedTwice    int            // an order's event written twice by its producer (a placed order answered twice, an answer applied twice)
	Problems        []string       // broken invariants, one line each (capped at MaxProblems)
	MoreProblems    int            // problems beyond MaxProblems
}

// Placed is the number of orders that were placed: every order but the drafts.
func (r Report) Placed() int {
	n := 0
	for status, c := range r.Orders {
		if status != "draft" {
			n += c
		}
	}
	return n
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
	reason  string            // the rejection's reason; "" unless rejected
	lines   map[string]string // product_id -> quantity, trailing zeros trimmed
	events  map[string]int    // outbox rows about this order, by event name (every producer's)
}

type shipState struct {
	status   string
	version  int
	shipment string // "" when none
}

// event is one outbox row of a producer.
type event struct {
	name  string
	order string
}

// Invariants reads the databases once and checks, for every order:
//
//   - a draft order has no event, no reservation and no shipping row;
//   - no order is left placed: stock answered it and order applied the
//     answer (placed -> confirmed or rejected), or it was cancelled;
//   - a confirmed order has exactly its lines held in stock, each once, with
//     the ordered quantity, and stock confirmed it; a rejected order has stock's
//     rejection and a reason; a rejected or cancelled order holds nothing: held
//     reservations are exactly those of confirmed uncancelled orders
//     (docs/architecture.md, rules 6 and 7);
//   - no event of the order is written twice by its producer (stock answers a
//     placed order once, order applies an answer once);
//   - an order with at least one event is known to shipping with the
//     order's own status and version (rule 4), and its shipment follows the
//     status (placed -> pending, confirmed -> ready, rejected and
//     cancelled -> cancelled): shipments are ready exactly for the confirmed
//     orders;
//
// for every tracked product (a product_stock row): the held reservations
// marked tracked sum to its reserved column and never to more than on hand
// (never oversold, rule 6);
//
// and, over every producer's outbox (contracts.Producers): each row is an
// event its producer publishes and is published (rule 2), and its id is a
// processed_event key of every consumer that receives it
// (contracts.ConsumersOf), with no key of a consumer that matches no event it
// receives (rule 3); reservations and shipping rows of unknown orders are
// reported too.
//
// Run it when the system is quiet (no request in flight and the queues
// drained), or through Eventually. It returns an error only when a query fails.
func Invariants(ctx context.Context, d DBs) (Report, error) {
	r := Report{Orders: map[string]int{}, Rejections: map[string]int{}, Events: map[string]int{},
		Processed: map[string]int{}, Shipments: map[string]int{}}

	orders := map[string]*order{}
	rows, err := d.Order.Query(ctx, `SELECT id::text, status, version, coalesce(rejection->>'reason', '') FROM orders`)
	if err != nil {
		return r, fmt.Errorf("read orders: %w", err)
	}
	for rows.Next() {
		var id string
		o := &order{lines: map[string]string{}, events: map[string]int{}}
		if err := rows.Scan(&id, &o.status, &o.version, &o.reason); err != nil {
			return r, fmt.Errorf("read orders: %w", err)
		}
		orders[id] = o
		r.Orders[o.status]++
		if o.status == "rejected" {
			r.Rejections[o.reason]++
		}
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

	events := map[string]event{}
	for _, p := range contracts.Producers() {
		if err := readOutbox(ctx, &r, d, p, orders, events); err != nil {
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
	if err := checkProducts(ctx, &r, d.Stock); err != nil {
		return r, err
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
		checkOrder(&r, id, orders[id], held[id], ship[id])
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

	for _, c := range contracts.Consumers() {
		if err := checkKeys(ctx, &r, d, c, events); err != nil {
			return r, err
		}
	}
	return r, nil
}

// readOutbox reads producer p's outbox into events and the orders' event counts.
func readOutbox(ctx context.Context, r *Report, d DBs, p contracts.Producer, orders map[string]*order, events map[string]event) error {
	pool, err := d.Of(p.Name)
	if err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `SELECT id::text, event_name, coalesce(envelope->'payload'->>'order_id', ''), published_at IS NOT NULL FROM outbox`)
	if err != nil {
		return fmt.Errorf("read %s outbox: %w", p.Name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, oid string
		var e event
		var published bool
		if err := rows.Scan(&id, &e.name, &oid, &published); err != nil {
			return fmt.Errorf("read %s outbox: %w", p.Name, err)
		}
		e.order = oid
		events[id] = e
		r.OutboxEvents++
		r.Events[e.name]++
		if !p.Publishes(e.name) {
			r.problem("%s outbox holds event %s of %s, which the registry does not list for it", p.Name, id, e.name)
		}
		if published {
			r.OutboxPublished++
		} else {
			r.problem("%s outbox event %s (%s, order %s) is not published", p.Name, id, e.name, oid)
		}
		// Order's and stock's events each name an order; a producer added to the
		// registry may publish events that name none.
		switch o := orders[oid]; {
		case o != nil:
			o.events[e.name]++
		case oid != "" || p.Name == contracts.ProducerOrder || p.Name == contracts.ProducerStock:
			r.problem("%s outbox event %s (%s) names unknown order %q", p.Name, id, e.name, oid)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s outbox: %w", p.Name, err)
	}
	return nil
}

// reservationsQuery lists the reservation rows stock holds (released ones are
// left out), one row per reserved line: order id, product id, quantity with
// trailing zeros trimmed.
const reservationsQuery = `SELECT order_id::text, product_id::text, trim_scale(quantity)::text FROM reservation WHERE status = 'held'`

// productsQuery lists every tracked product with its on-hand quantity, its
// reserved column and the sum of its held reservations marked tracked (the
// ones reserved counts), and whether that sum stays within on hand and equals
// reserved; quantities with trailing zeros trimmed.
const productsQuery = `SELECT p.product_id::text, trim_scale(p.on_hand)::text, trim_scale(p.reserved)::text,
       trim_scale(coalesce(h.held, 0))::text, coalesce(h.held, 0) <= p.on_hand, coalesce(h.held, 0) = p.reserved
FROM product_stock p
LEFT JOIN (SELECT product_id, sum(quantity) AS held FROM reservation
           WHERE status = 'held' AND tracked GROUP BY product_id) h USING (product_id)`

// checkProducts checks that no tracked product is oversold and that its
// reserved column is the sum of its held reservations.
func checkProducts(ctx context.Context, r *Report, stock *pgxpool.Pool) error {
	rows, err := stock.Query(ctx, productsQuery)
	if err != nil {
		return fmt.Errorf("read product_stock: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid, onHand, reserved, held string
		var within, equal bool
		if err := rows.Scan(&pid, &onHand, &reserved, &held, &within, &equal); err != nil {
			return fmt.Errorf("read product_stock: %w", err)
		}
		r.Products++
		if !within {
			r.problem("product %s is oversold: %s held, %s on hand", pid, held, onHand)
		}
		if !equal {
			r.problem("product %s: reserved is %s but its held reservations sum to %s", pid, reserved, held)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read product_stock: %w", err)
	}
	return nil
}

func checkOrder(r *Report, id string, o *order, held map[string][]string, s *shipState) {
	for name, n := range o.events {
		if n > 1 {
			r.AppliedTwice += n - 1
			r.problem("order %s: %s written %d times", id, name, n)
		}
	}
	switch o.status {
	case "draft":
		if len(o.events) > 0 {
			r.problem("draft order %s has events %v", id, o.events)
		}
		if len(held) > 0 {
			r.problem("draft order %s holds reservations %v", id, held)
		}
	case "placed":
		r.problem("order %s is still placed: stock's answer is not applied (reservations held: %v)", id, held)
	case "confirmed":
		if o.events[contracts.EventStockReservationConfirmed] == 0 {
			r.problem("confirmed order %s has no %s", id, contracts.EventStockReservationConfirmed)
		}
		for pid, qty := range o.lines {
			got := held[pid]
			switch {
			case len(got) == 0:
				r.problem("confirmed order %s: line %s (%s) is not reserved", id, pid, qty)
			case len(got) > 1:
				r.DoubleReserved++
				r.problem("confirmed order %s: line %s reserved %d times %v", id, pid, len(got), got)
			case got[0] != qty:
				r.problem("confirmed order %s: line %s reserved %s, ordered %s", id, pid, got[0], qty)
			}
		}
		for pid, got := range held {
			if _, ok := o.lines[pid]; !ok {
				r.problem("confirmed order %s: product %s reserved %v but not ordered", id, pid, got)
			}
		}
	case "rejected", "cancelled":
		if o.status == "rejected" {
			if o.events[contracts.EventStockReservationRejected] == 0 {
				r.problem("rejected order %s has no %s", id, contracts.EventStockReservationRejected)
			}
			if o.reason == "" {
				r.problem("rejected order %s keeps no reason", id)
			}
		}
		if len(held) > 0 {
			r.problem("%s order %s still holds reservations %v", o.status, id, held)
		}
	default:
		r.problem("order %s has unknown status %q", id, o.status)
	}

	if len(o.events) == 0 {
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

// checkKeys compares consumer c's processed_event keys with the outbox events
// it receives.
func checkKeys(ctx context.Context, r *Report, d DBs, c contracts.Consumer, events map[string]event) error {
	pool, err := d.Of(c.Name)
	if err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `SELECT message_key FROM processed_event WHERE consumer = $1`, c.Name)
	if err != nil {
		return fmt.Errorf("read %s processed_event: %w", c.Name, err)
	}
	keys := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("read %s processed_event: %w", c.Name, err)
		}
		keys[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s processed_event: %w", c.Name, err)
	}
	r.Processed[c.Name] = len(keys)
	for id, e := range events {
		if c.Receives(e.name) && !keys[id] {
			r.Lost++
			r.problem("event %s (%s, order %s) never processed by %s", id, e.name, e.order, c.Name)
		}
	}
	for id := range keys {
		e, ok := events[id]
		switch {
		case !ok:
			r.problem("%s processed event %s that no outbox holds", c.Name, id)
		case !c.Receives(e.name):
			r.problem("%s processed event %s of %s, which its queue is not bound to", c.Name, id, e.name)
		}
	}
	return nil
}

// DeadLetters are the consumers' open dead letters: dead_letter records nobody has
// replayed or dropped yet. The record, not the dead-letter queue, is the truth: a
// purged queue empties no record.
type DeadLetters struct {
	// Open counts each consumer's open dead letters (distinct message keys), by
	// consumer name (contracts.Consumers): poison messages included.
	Open map[string]int
	// Events counts, per consumer, the outbox events among them (any producer's):
	// not delivered, awaiting a decision (counted in Report.Lost too).
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

// OpenDeadLetters reads the open dead letters of every consumer of the
// registry, and which of them are events of a producer's outbox.
func OpenDeadLetters(ctx context.Context, d DBs) (DeadLetters, error) {
	out := DeadLetters{Open: map[string]int{}, Events: map[string]int{}}
	for _, c := range contracts.Consumers() {
		pool, err := d.Of(c.Name)
		if err != nil {
			return out, err
		}
		var open int
		var ids []string
		err = pool.QueryRow(ctx, `SELECT count(DISTINCT message_key), COALESCE(array_agg(DISTINCT event_id::text) FILTER (WHERE event_id IS NOT NULL), '{}')
FROM dead_letter WHERE consumer = $1 AND resolved_at IS NULL`, c.Name).Scan(&open, &ids)
		if err != nil {
			return out, fmt.Errorf("read %s dead letters: %w", c.Name, err)
		}
		out.Open[c.Name] = open
		events := 0
		for _, p := range contracts.Producers() {
			ppool, err := d.Of(p.Name)
			if err != nil {
				return out, err
			}
			var n int
			if err := ppool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE id = ANY($1::uuid[])`, ids).Scan(&n); err != nil {
				return out, fmt.Errorf("match %s dead letters with the %s outbox: %w", c.Name, p.Name, err)
			}
			events += n
		}
		out.Events[c.Name] = events
	}
	return out, nil
}
