package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/testkit"
)

// TestPlaceReservesAndShips follows one order of untracked products: once
// placed, stock reserves each of its lines and confirms it, order moves to
// confirmed at version 3, and shipping follows with a ready shipment.
func TestPlaceReservesAndShips(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{})
	ctx := testkit.Context(t)

	o := s.createOrder(ctx, 3)
	s.place(ctx, o.ID, http.StatusOK)
	got, status, err := s.api.Order(ctx, o.ID)
	placed := got.Status == "placed" && got.Version == 2
	confirmed := got.Status == "confirmed" && got.Version == 3 // stock's answer may be quicker than the GET
	if err != nil || status != http.StatusOK || !placed && !confirmed {
		t.Fatalf("order after place = %+v (status %d, err %v), want placed at version 2", got, status, err)
	}

	s.waitReserved(ctx, o)
	s.waitOrder(ctx, o.ID, "confirmed", 3)
	s.waitShipping(ctx, o.ID, "confirmed", 3, "ready")
	for _, name := range []string{contracts.EventOrderPlaced, contracts.EventOrderConfirmed} {
		if n := count(t, ctx, s.dbs.Order, `SELECT count(*) FROM outbox WHERE envelope->'payload'->>'order_id' = $1 AND event_name = $2`, o.ID, name); n != 1 {
			t.Errorf("%s rows for the order = %d, want 1", name, n)
		}
	}
	if n := count(t, ctx, s.dbs.Stock, `SELECT count(*) FROM outbox WHERE envelope->'payload'->>'order_id' = $1 AND event_name = $2`,
		o.ID, contracts.EventStockReservationConfirmed); n != 1 {
		t.Errorf("stock's confirmations of the order = %d, want 1", n)
	}

	// Placing twice is a conflict; an unknown order is not found.
	s.place(ctx, o.ID, http.StatusConflict)
	s.place(ctx, uuid.NewString(), http.StatusNotFound)
	s.invariants(ctx)
}

// TestDoubleClick places one order twice at the same moment: one request
// wins with 200, the other waits on the row lock and gets 409, and exactly
// one event and one set of reservations follow (docs/architecture.md, rule 1).
func TestDoubleClick(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{})
	ctx := testkit.Context(t)

	for round := range 5 {
		o := s.createOrder(ctx, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		statuses := make([]int, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() {
				<-start
				statuses[i], errs[i] = s.api.Place(ctx, o.ID)
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: place: %v", round, err)
			}
		}
		sort.Ints(statuses)
		if !slices.Equal(statuses, []int{http.StatusOK, http.StatusConflict}) {
			t.Fatalf("round %d: statuses of two concurrent places = %v, want [200 409]", round, statuses)
		}
		s.waitReserved(ctx, o)
		if n := count(t, ctx, s.dbs.Order, `SELECT count(*) FROM outbox WHERE envelope->'payload'->>'order_id' = $1 AND event_name = $2`,
			o.ID, contracts.EventOrderPlaced); n != 1 {
			t.Fatalf("round %d: placed events of the order = %d, want 1", round, n)
		}
	}
	r := s.invariants(ctx)
	if r.Events[contracts.EventOrderPlaced] != 5 || r.Processed[contracts.ConsumerStock] != 5 {
		t.Errorf("placed events = %d, stock processed = %d; want 5 and 5", r.Events[contracts.EventOrderPlaced], r.Processed[contracts.ConsumerStock])
	}
}

// TestDuplicateRepublish publishes every event of both legs twice more, as a
// relay that crashed between the broker's confirm and its commit would: an
// order's placed event, stock's confirmation and rejection, order's confirmed
// and rejected events. Every consumer that receives one recognises it by its
// event_id (docs/architecture.md, rule 3) and nothing changes: orders,
// reservations, products, shipping, outboxes and processed_event keys are as
// before.
func TestDuplicateRepublish(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{})
	ctx := testkit.Context(t)

	product := s.trackedProduct(ctx, "1.000")
	confirmed := s.placeOrder(ctx, system.Line{ProductID: product, Quantity: "1"}, system.Line{ProductID: uuid.NewString(), Quantity: "2.5"})
	s.waitOrder(ctx, confirmed, "confirmed", 3)
	rejected := s.placeOrder(ctx, system.Line{ProductID: product, Quantity: "1"})
	s.waitOrder(ctx, rejected, "rejected", 3)
	s.invariants(ctx)

	type event struct{ id, name, body string }
	var events []event
	for _, p := range contracts.Producers() {
		pool, err := s.dbs.Of(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := pool.Query(ctx, `SELECT id::text, event_name, envelope::text FROM outbox ORDER BY occurred_at, id`)
		if err != nil {
			t.Fatalf("read the %s outbox: %v", p.Name, err)
		}
		for rows.Next() {
			var e event
			if err := rows.Scan(&e.id, &e.name, &e.body); err != nil {
				t.Fatal(err)
			}
			events = append(events, e)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, e := range events {
		seen[e.name] = true
	}
	for _, name := range contracts.EventNames() {
		if name != contracts.EventOrderCancelled && !seen[name] {
			t.Fatalf("no %s to republish among %d events", name, len(events))
		}
	}

	before := s.snapshot(ctx)
	duplicates := func() map[string]float64 {
		d := map[string]float64{}
		for _, c := range contracts.Consumers() {
			v, err := s.sys.Process(c.Name).Metric(ctx, "inbox_duplicates_total", map[string]string{"consumer": c.Name})
			if err != nil {
				t.Fatalf("%s duplicates: %v", c.Name, err)
			}
			d[c.Name] = v
		}
		return d
	}
	dup0 := duplicates()
	want := map[string]float64{}
	for _, e := range events {
		for range 2 {
			if err := system.Publish(ctx, s.asRelayOf(e.name), contracts.Exchange, e.name, e.id, []byte(e.body)); err != nil {
				t.Fatalf("republish %s: %v", e.name, err)
			}
		}
		for _, c := range contracts.ConsumersOf(e.name) {
			want[c.Name] += 2
		}
	}
	eventually(t, "every consumer counts its duplicates", func() string {
		got := duplicates()
		for name := range got {
			got[name] -= dup0[name]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("duplicates %v, want %v", got, want)
		}
		return ""
	})
	if after := s.snapshot(ctx); after != before {
		t.Errorf("the duplicates changed the system:\nbefore %s\nafter  %s", before, after)
	}
	s.invariants(ctx)
}

// snapshot is the state of every database in one string: orders, reservations,
// products, shipping's copies and shipments, and each service's outbox and
// processed_event counts.
func (s *testSystem) snapshot(ctx context.Context) string {
	s.t.Helper()
	var b strings.Builder
	for _, q := range []struct {
		service, sql string
	}{
		{contracts.ProducerOrder, `SELECT string_agg(id || ' ' || status || ' v' || version, ', ' ORDER BY id) FROM orders`},
		{contracts.ConsumerStock, `SELECT string_agg(order_id || ' ' || product_id || ' ' || quantity || ' ' || status, ', ' ORDER BY order_id, product_id) FROM reservation`},
		{contracts.ConsumerStock, `SELECT string_agg(product_id || ' ' || on_hand || ' ' || reserved, ', ' ORDER BY product_id) FROM product_stock`},
		{contracts.ConsumerShipping, `SELECT string_agg(order_id || ' ' || status || ' v' || version, ', ' ORDER BY order_id) FROM order_status`},
		{contracts.ConsumerShipping, `SELECT string_agg(order_id || ' ' || status, ', ' ORDER BY order_id) FROM shipment`},
	} {
		pool, err := s.dbs.Of(q.service)
		if err != nil {
			s.t.Fatal(err)
		}
		var v *string
		if err := pool.QueryRow(ctx, q.sql).Scan(&v); err != nil {
			s.t.Fatalf("%s: %v", q.sql, err)
		}
		if v != nil {
			fmt.Fprintf(&b, "%s: %s\n", q.service, *v)
		}
	}
	for _, svc := range contracts.Services() {
		pool, err := s.dbs.Of(svc.Name)
		if err != nil {
			s.t.Fatal(err)
		}
		var outbox, keys int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&outbox) // a service without one keeps 0
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&keys); err != nil {
			s.t.Fatalf("%s processed_event: %v", svc.Name, err)
		}
		fmt.Fprintf(&b, "%s: outbox %d, processed_event %d\n", svc.Name, outbox, keys)
	}
	return b.String()
}

// TestCancelAfterPlace cancels a confirmed order: stock releases its
// reservations, shipping moves to cancelled at version 4 and cancels the
// shipment.
func TestCancelAfterPlace(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{})
	ctx := testkit.Context(t)

	o := s.createOrder(ctx, 2)
	s.place(ctx, o.ID, http.StatusOK)
	s.waitReserved(ctx, o)
	s.waitShipping(ctx, o.ID, "confirmed", 3, "ready")

	if st, err := s.api.Cancel(ctx, o.ID); err != nil || st != http.StatusOK {
		t.Fatalf("cancel: status %d, err %v; want 200", st, err)
	}
	got, _, err := s.api.Order(ctx, o.ID)
	if err != nil || got.Status != "cancelled" || got.Version != 4 {
		t.Fatalf("order after cancel = %+v (err %v), want cancelled at version 4", got, err)
	}
	// The released reservations stay visible, with status released.
	eventually(t, "reservations released", func() string {
		rs, err := s.api.Reservations(ctx, o.ID)
		if err != nil {
			return err.Error()
		}
		if held := system.Held(rs); len(rs) != len(o.Lines) || len(held) != 0 {
			return fmt.Sprintf("%d reservations, %d held: %+v; want %d, all released", len(rs), len(held), rs, len(o.Lines))
		}
		return ""
	})
	s.waitShipping(ctx, o.ID, "cancelled", 4, "cancelled")
	if st, err := s.api.Cancel(ctx, o.ID); err != nil || st != http.StatusConflict {
		t.Errorf("second cancel: status %d, err %v; want 409", st, err)
	}
	s.invariants(ctx)
}

// TestRelayKilledMidStream kills the relay with SIGKILL twice while 200
// orders are placed concurrently, and restarts it each time: every event
// still arrives (no loss), and each exactly once in effect.
func TestRelayKilledMidStream(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{})
	ctx := testkit.Context(t)

	const total = 200
	s.placeMany(ctx, total, 8, map[int]func(){
		60:  func() { s.crash(ctx, s.sys.Relay) },
		140: func() { s.crash(ctx, s.sys.Relay) },
	})
	r := s.invariants(ctx)
	// Untracked products: stock confirms every order, order applies each answer.
	if r.Orders["confirmed"] != total || r.Events[contracts.EventOrderPlaced] != total || r.Processed[contracts.ConsumerStock] != total ||
		r.Processed[contracts.ConsumerOrder] != total || r.Processed[contracts.ConsumerShipping] != 2*total {
		t.Errorf("report %+v; want %d placed and confirmed, each event processed by its consumers", r, total)
	}
}

// TestConsumerKilledMidStream kills stock (and later shipping) with SIGKILL
// while events flow, and restarts them: messages in flight come back, and
// the processed_event keys keep their effects single (no double reservation).
func TestConsumerKilledMidStream(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{})
	ctx := testkit.Context(t)

	const total = 200
	s.placeMany(ctx, total, 8, map[int]func(){
		70: func() {
			s.waitProcessed(ctx, "stock", 20)
			s.crash(ctx, s.sys.Stock)
		},
		150: func() {
			s.waitProcessed(ctx, "shipping", 60)
			s.crash(ctx, s.sys.Shipping)
		},
	})
	r := s.invariants(ctx)
	if r.Orders["confirmed"] != total || r.ReservedLines != 2*total || r.Processed[contracts.ConsumerStock] != total {
		t.Errorf("report %+v; want %d confirmed with %d reserved lines", r, total, 2*total)
	}
}

// TestPoisonMessageDeadLettered publishes bodies that are no valid event to
// app.events: each consumer dead-letters them at once (no retry loop) and
// goes on with the real events.
func TestPoisonMessageDeadLettered(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{})
	ctx := testkit.Context(t)

	poison := []string{
		`not json at all`,
		`{"event_id":"not-a-uuid","event_name":"order.order.placed.v1","payload":{}}`,
	}
	for i, body := range poison {
		if err := system.Publish(ctx, s.amqpURL, contracts.Exchange, contracts.EventOrderPlaced, fmt.Sprintf("poison-%d", i), []byte(body)); err != nil {
			t.Fatalf("publish poison: %v", err)
		}
	}
	eventually(t, "poison in both dead-letter queues", func() string {
		d, err := system.QueueDepths(ctx, s.amqpURL, contracts.QueueStockDLQ, contracts.QueueShippingDLQ)
		if err != nil {
			return err.Error()
		}
		if d[contracts.QueueStockDLQ] != len(poison) || d[contracts.QueueShippingDLQ] != len(poison) {
			return fmt.Sprintf("depths %v", d)
		}
		return ""
	})
	o := s.createOrder(ctx, 1)
	s.place(ctx, o.ID, http.StatusOK)
	s.waitReserved(ctx, o)
	s.invariants(ctx)
	d, err := system.QueueDepths(ctx, s.amqpURL, contracts.QueueStockDLQ, contracts.QueueShippingDLQ, contracts.QueueStock, contracts.QueueShipping)
	if err != nil {
		t.Fatal(err)
	}
	if d[contracts.QueueStockDLQ] != len(poison) || d[contracts.QueueShippingDLQ] != len(poison) || d[contracts.QueueStock] != 0 || d[contracts.QueueShipping] != 0 {
		t.Errorf("queue depths at the end = %v; want %d in each DLQ and empty main queues", d, len(poison))
	}
}

// placeMany creates and places total orders of two lines with the given
// number of concurrent clients. When the i-th place succeeds, at[i] (if any)
// runs in its own goroutine while the clients go on; placeMany waits for
// those too. A failed request fails the test.
func (s *testSystem) placeMany(ctx context.Context, total, clients int, at map[int]func()) {
	s.t.Helper()
	var placed atomic.Int64
	var next atomic.Int64
	var wg, hooks sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(total) {
				o, err := s.api.CreateOrder(ctx, uuid.NewString(), newLines(2))
				if err != nil {
					s.t.Errorf("create: %v", err)
					return
				}
				if st, err := s.api.Place(ctx, o.ID); err != nil || st != http.StatusOK {
					s.t.Errorf("place %s: status %d, err %v", o.ID, st, err)
					return
				}
				if hook := at[int(placed.Add(1))]; hook != nil {
					hooks.Go(hook)
				}
			}
		})
	}
	wg.Wait()
	hooks.Wait()
	if s.t.Failed() {
		s.t.FailNow()
	}
}

// crash kills p with SIGKILL, as a crash of its machine would, then starts
// it again and waits until it is ready. It may run outside the test's
// goroutine, so it reports with Errorf only. Crashes run one at a time: a
// second waits until the first process is back.
func (s *testSystem) crash(ctx context.Context, p *system.Process) {
	s.crashMu.Lock()
	defer s.crashMu.Unlock()
	var published int
	_ = s.dbs.Order.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`).Scan(&published)
	if err := p.Kill(); err != nil {
		s.t.Errorf("kill %s: %v", p.Name, err)
		return
	}
	s.t.Logf("killed %s with SIGKILL (%d events published so far)", p.Name, published)
	time.Sleep(200 * time.Millisecond)
	if err := s.sys.Restart(ctx, p, settle); err != nil {
		s.t.Errorf("restart %s: %v", p.Name, err)
	}
}

// waitProcessed waits until consumer's processed_event holds at least n keys.
func (s *testSystem) waitProcessed(ctx context.Context, consumer string, n int) {
	pool, err := s.dbs.Of(consumer)
	if err != nil {
		s.t.Error(err)
		return
	}
	deadline := time.Now().Add(settle)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var got int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE consumer = $1`, consumer).Scan(&got); err == nil && got >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitReserved waits until stock shows exactly o's lines as reservations.
func (s *testSystem) waitReserved(ctx context.Context, o system.Order) {
	s.t.Helper()
	want := map[string]string{}
	for _, l := range o.Lines {
		want[l.ProductID] = normQty(l.Quantity)
	}
	eventually(s.t, "reservations of order "+o.ID, func() string {
		rs, err := s.api.Reservations(ctx, o.ID)
		if err != nil {
			return err.Error()
		}
		got := map[string]string{}
		for _, r := range rs {
			if r.Status != "held" {
				return fmt.Sprintf("reservation %+v is not held", r)
			}
			if _, dup := got[r.ProductID]; dup {
				return fmt.Sprintf("product %s reserved twice: %+v", r.ProductID, rs)
			}
			got[r.ProductID] = normQty(r.Quantity)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("reserved %v, want %v", got, want)
		}
		return ""
	})
}

// waitOrder waits until the order API shows the order at status and version.
func (s *testSystem) waitOrder(ctx context.Context, orderID, status string, version int) system.Order {
	s.t.Helper()
	var o system.Order
	eventually(s.t, "order "+orderID, func() string {
		var code int
		var err error
		o, code, err = s.api.Order(ctx, orderID)
		if err != nil || code != http.StatusOK {
			return fmt.Sprintf("order: %d %v", code, err)
		}
		if o.Status != status || o.Version != version {
			return fmt.Sprintf("order %s v%d, want %s v%d", o.Status, o.Version, status, version)
		}
		return ""
	})
	return o
}

// waitShipping waits until shipping shows the order at status and version
// with a shipment in shipment status.
func (s *testSystem) waitShipping(ctx context.Context, orderID, status string, version int, shipment string) {
	s.t.Helper()
	eventually(s.t, "shipping of order "+orderID, func() string {
		st, code, err := s.api.OrderStatus(ctx, orderID)
		if err != nil || code != http.StatusOK {
			return fmt.Sprintf("order-status: %d %v", code, err)
		}
		if st.Status != status || st.Version != version {
			return fmt.Sprintf("order-status %+v, want %s v%d", st, status, version)
		}
		sh, code, err := s.api.Shipment(ctx, orderID)
		if err != nil || code != http.StatusOK {
			return fmt.Sprintf("shipment: %d %v", code, err)
		}
		if sh.Status != shipment {
			return fmt.Sprintf("shipment %+v, want %s", sh, shipment)
		}
		return ""
	})
}

// metric reads one counter of p, failing the test when /metrics does not answer.
func (s *testSystem) metric(ctx context.Context, p *system.Process, name string) float64 {
	s.t.Helper()
	v, err := p.Metric(ctx, name, nil)
	if err != nil {
		s.t.Fatalf("metric %s: %v", name, err)
	}
	return v
}

// normQty drops trailing zeros of a decimal string: "2.500" -> "2.5", "3.000" -> "3".
func normQty(q string) string {
	if strings.Contains(q, ".") {
		q = strings.TrimRight(strings.TrimRight(q, "0"), ".")
	}
	return q
}
