package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/check"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/testkit"
)

// TestStockNeverOversold is the race of docs/architecture.md rule 6 on real
// processes: eight `stock serve` processes (group commit on) consume one queue
// while 200 placed orders of one unit each compete for the 50 units of one
// tracked product. Exactly 50 orders are confirmed and 150 rejected with reason
// insufficient_stock; sampled all along, the product's held reservations never
// exceed its 50 units; the ledger holds.
func TestStockNeverOversold(t *testing.T) {
	t.Parallel()
	const processes, orders, units = 8, 200, 50
	s := newShop(t, options{})
	ctx := testkit.Context(t)
	product := s.trackedProduct(ctx, fmt.Sprintf("%d.000", units))

	// The relay stays stopped while the orders are placed, so that their events
	// reach the eight processes in one burst.
	if err := s.sys.Relay.Stop(settle); err != nil {
		t.Fatalf("stop the relay: %v", err)
	}
	ids := make([]string, orders)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for n := int(next.Add(1)) - 1; n < orders && !t.Failed(); n = int(next.Add(1)) - 1 {
				ids[n] = s.placeOrder(ctx, system.Line{ProductID: product, Quantity: "1"})
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Eight consumers on stock's queue: the shop's own, restarted with a small
	// prefetch so that the burst spreads, and seven copies of it.
	env := []string{"STOCK_WORKERS=8", "STOCK_PREFETCH=16"}
	if err := s.sys.Stock.Stop(settle); err != nil {
		t.Fatalf("stop stock: %v", err)
	}
	s.sys.Stock.Env = append(s.sys.Stock.Env, env...)
	if err := s.sys.Restart(ctx, s.sys.Stock, settle); err != nil {
		t.Fatalf("restart stock: %v", err)
	}
	stocks := append([]*system.Process{s.sys.Stock}, s.copies(ctx, s.sys.Stock, processes-1, env...)...)

	// Sample the product's held reservations until every order is answered.
	sampled := make(chan string, 1)
	sctx, stopSampling := context.WithCancel(ctx)
	go func() {
		maxHeld, samples := "0", 0
		defer func() { sampled <- fmt.Sprintf("%d samples, at most %s held", samples, maxHeld) }()
		for sctx.Err() == nil {
			var held string
			var over bool
			err := s.dbs.Stock.QueryRow(sctx, `SELECT trim_scale(coalesce(sum(quantity), 0))::text, coalesce(sum(quantity), 0) > $2
FROM reservation WHERE product_id = $1 AND status = 'held'`, product, units).Scan(&held, &over)
			if err == nil {
				samples++
				if over {
					t.Errorf("product %s oversold: %s held of %d", product, held, units)
				}
				if len(held) > len(maxHeld) || len(held) == len(maxHeld) && held > maxHeld {
					maxHeld = held
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	start := time.Now()
	if err := s.sys.Restart(ctx, s.sys.Relay, settle); err != nil {
		t.Fatalf("restart the relay: %v", err)
	}
	r := s.invariants(ctx)
	stopSampling()
	t.Logf("%d orders answered by %d stock processes in %s; %s", orders, processes, time.Since(start).Round(10*time.Millisecond), <-sampled)

	if r.Orders["confirmed"] != units || r.Orders["rejected"] != orders-units || r.Rejections[contracts.RejectionInsufficientStock] != orders-units {
		t.Errorf("orders %v, rejections %v; want %d confirmed, %d rejected for %s",
			r.Orders, r.Rejections, units, orders-units, contracts.RejectionInsufficientStock)
	}
	assertStock(t, ctx, s, product, "50.000", "50.000", "0.000")
	for _, id := range ids {
		o, _, err := s.api.Order(ctx, id)
		if err != nil || o.Status != "rejected" {
			continue
		}
		if o.Rejection == nil || o.Rejection.Reason != contracts.RejectionInsufficientStock || len(o.Rejection.Lines) != 1 ||
			o.Rejection.Lines[0].ProductID.String() != product || normQty(o.Rejection.Lines[0].Requested) != "1" || normQty(o.Rejection.Lines[0].Available) != "0" {
			t.Errorf("rejected order %s: rejection %+v, want %s for 1 of %s with 0 available", id, o.Rejection, contracts.RejectionInsufficientStock, product)
		}
		break
	}
	busy := 0
	var took []string
	for _, p := range stocks {
		if v, err := p.Metric(ctx, "inbox_processed_total", nil); err == nil && v > 0 {
			busy++
			took = append(took, fmt.Sprintf("%s %v", p.Name, v))
		}
	}
	t.Logf("events processed: %s", strings.Join(took, ", "))
	if busy < 2 {
		t.Errorf("only %d of %d stock processes took part in the race", busy, processes)
	}
}

// TestCancelCrossesTheAnswer runs every interleaving of place, stock's answer
// and cancel (docs/architecture.md, rules 4, 6 and 7). However the cancel and
// the answer cross, the order ends cancelled and nothing is held for it:
//
//   - cancelled before stock sees the order (stock stopped): stock reserves,
//     answers, then releases; order ignores the answer;
//   - cancelled while stock's answer waits in its outbox (stock's relay
//     stopped): the release comes first, the late answer changes nothing;
//   - cancelled while the answer is on its way to order (taken from
//     order.events and held unacknowledged until the cancel committed);
//   - the cancel overtakes the placed event at stock (published by hand
//     first): stock never reserves and never answers;
//   - cancel and answer at the same moment, ten orders at once;
//   - cancelled after confirmation: the released units go to a later order;
//     a rejected order's cancel is 409.
//
// Last, the ledger is shown to see each invariant of the answer leg broken by
// hand.
func TestCancelCrossesTheAnswer(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{})
	ctx := testkit.Context(t)
	product := s.trackedProduct(ctx, "100.000")
	line := func() []system.Line {
		return []system.Line{{ProductID: product, Quantity: "1"}, {ProductID: uuid.NewString(), Quantity: "2"}}
	}

	t.Run("before-stock-sees-it", func(t *testing.T) {
		s := s.on(t)
		s.stop(s.sys.Stock)
		id := s.placeOrder(ctx, line()...)
		s.cancel(ctx, id, http.StatusOK)
		s.restart(ctx, s.sys.Stock)
		// Stock's workers may take the cancel before the placed event: then it
		// never reserves nor answers.
		s.endsCancelled(ctx, id, "any")
	})

	t.Run("answer-in-stocks-outbox", func(t *testing.T) {
		s := s.on(t)
		relay := s.sys.Process(system.RelayName(contracts.ProducerStock))
		s.stop(relay)
		id := s.placeOrder(ctx, line()...)
		s.waitHeld(ctx, id, 2)
		s.cancel(ctx, id, http.StatusOK)
		s.waitHeld(ctx, id, 0)
		s.restart(ctx, relay)
		s.endsCancelled(ctx, id, contracts.EventStockReservationConfirmed)
	})

	t.Run("answer-held-before-order", func(t *testing.T) {
		s := s.on(t)
		// Order serve stops once stock has answered; the answer, taken from
		// order.events and held unacknowledged, is handed back only after the
		// cancel committed.
		id := s.placeOrder(ctx, line()...)
		s.stop(s.sys.OrderAPI)
		s.waitQueued(ctx, contracts.QueueOrder, 1)
		release := s.holdMessage(ctx, contracts.QueueOrder)
		s.restart(ctx, s.sys.OrderAPI)
		s.cancel(ctx, id, http.StatusOK)
		release()
		s.endsCancelled(ctx, id, contracts.EventStockReservationConfirmed)
		if o, _, err := s.api.Order(ctx, id); err != nil || o.Version != 3 {
			t.Errorf("order %+v (err %v), want cancelled from placed at v3: the held answer was not applied", o, err)
		}
	})

	t.Run("cancel-overtakes-placed", func(t *testing.T) {
		s := s.on(t)
		s.stop(s.sys.Relay)
		id := s.placeOrder(ctx, line()...)
		s.cancel(ctx, id, http.StatusOK)
		var evID, body string
		if err := s.dbs.Order.QueryRow(ctx, `SELECT id::text, envelope::text FROM outbox
WHERE envelope->'payload'->>'order_id' = $1 AND event_name = $2`, id, contracts.EventOrderCancelled).Scan(&evID, &body); err != nil {
			t.Fatalf("read the cancelled event: %v", err)
		}
		if err := system.Publish(ctx, s.asRelayOf(contracts.EventOrderCancelled), contracts.Exchange, contracts.EventOrderCancelled, evID, []byte(body)); err != nil {
			t.Fatalf("publish the cancelled event: %v", err)
		}
		s.waitStockStatus(ctx, id, "cancelled")
		s.restart(ctx, s.sys.Relay)
		s.endsCancelled(ctx, id, "")
		if n := count(t, ctx, s.dbs.Stock, `SELECT count(*) FROM reservation WHERE order_id = $1`, id); n != 0 {
			t.Errorf("stock reserved %d lines of an order it knew cancelled", n)
		}
	})

	t.Run("at-the-same-moment", func(t *testing.T) {
		s := s.on(t)
		const n = 10
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range ids {
			wg.Go(func() {
				ids[i] = s.placeOrder(ctx, line()...)
				time.Sleep(time.Duration(i*15) * time.Millisecond) // from before stock's answer to after it
				s.cancel(ctx, ids[i], http.StatusOK)
			})
		}
		wg.Wait()
		for _, id := range ids {
			s.endsCancelled(ctx, id, "any")
		}
	})

	t.Run("after-confirmation", func(t *testing.T) {
		s := s.on(t)
		one := s.trackedProduct(ctx, "1.000")
		first := s.placeOrder(ctx, system.Line{ProductID: one, Quantity: "1"})
		s.waitOrder(ctx, first, "confirmed", 3)
		second := s.placeOrder(ctx, system.Line{ProductID: one, Quantity: "1"})
		rejected := s.waitOrder(ctx, second, "rejected", 3)
		if rejected.Rejection == nil || rejected.Rejection.Reason != contracts.RejectionInsufficientStock {
			t.Errorf("rejected order's rejection = %+v, want %s", rejected.Rejection, contracts.RejectionInsufficientStock)
		}
		s.cancel(ctx, second, http.StatusConflict)
		s.cancel(ctx, first, http.StatusOK)
		s.endsCancelled(ctx, first, contracts.EventStockReservationConfirmed)
		eventually(t, "the unit released", func() string {
			if ps, err := s.api.Stock(ctx, one); err != nil || ps.Available != "1.000" {
				return fmt.Sprintf("stock %+v (err %v), want 1.000 available", ps, err)
			}
			return ""
		})
		third := s.placeOrder(ctx, system.Line{ProductID: one, Quantity: "1"})
		s.waitOrder(ctx, third, "confirmed", 3)
		s.waitShipping(ctx, third, "confirmed", 3, "ready")
	})

	r := s.invariants(ctx)
	t.Logf("orders %v", r.Orders)

	// The ledger sees each invariant of the answer leg broken by hand, and holds
	// again once it is undone.
	t.Run("ledger-sees-breaks", func(t *testing.T) {
		s := s.on(t)
		var order, answer, product string
		if err := s.dbs.Order.QueryRow(ctx, `SELECT id::text FROM orders WHERE status = 'confirmed' LIMIT 1`).Scan(&order); err != nil {
			t.Fatal(err)
		}
		if err := s.dbs.Stock.QueryRow(ctx, `SELECT id::text FROM outbox WHERE envelope->'payload'->>'order_id' = $1`, order).Scan(&answer); err != nil {
			t.Fatal(err)
		}
		if err := s.dbs.Stock.QueryRow(ctx, `SELECT product_id::text FROM reservation WHERE order_id = $1 AND tracked AND status = 'held' LIMIT 1`,
			order).Scan(&product); err != nil {
			t.Fatal(err)
		}
		for _, b := range []struct {
			name        string
			pool        *pgxpool.Pool
			break_, fix string
			want        string
		}{
			{"reserved drifts from the held reservations", s.dbs.Stock,
				`UPDATE product_stock SET reserved = reserved - 1 WHERE product_id = '` + product + `'`,
				`UPDATE product_stock SET reserved = reserved + 1 WHERE product_id = '` + product + `'`,
				"reserved is"},
			{"oversold", s.dbs.Stock,
				`UPDATE reservation SET quantity = quantity + 1000 WHERE product_id = '` + product + `' AND status = 'held' AND order_id = '` + order + `'`,
				`UPDATE reservation SET quantity = quantity - 1000 WHERE product_id = '` + product + `' AND status = 'held' AND order_id = '` + order + `'`,
				"oversold"},
			{"an answer never consumed by order", s.dbs.Order,
				`UPDATE processed_event SET message_key = 'x' || message_key WHERE consumer = 'order' AND message_key = '` + answer + `'`,
				`UPDATE processed_event SET message_key = substr(message_key, 2) WHERE consumer = 'order' AND message_key = 'x` + answer + `'`,
				"never processed by order"},
			{"an order left placed", s.dbs.Order,
				`UPDATE orders SET status = 'placed' WHERE id = '` + order + `'`,
				`UPDATE orders SET status = 'confirmed' WHERE id = '` + order + `'`,
				"still placed"},
		} {
			if _, err := b.pool.Exec(ctx, b.break_); err != nil {
				t.Fatalf("%s: %v", b.name, err)
			}
			r, err := check.Invariants(ctx, s.dbs)
			if _, ferr := b.pool.Exec(ctx, b.fix); ferr != nil {
				t.Fatalf("undo %s: %v", b.name, ferr)
			}
			if err != nil || r.OK() || !strings.Contains(r.String(), b.want) {
				t.Errorf("%s: the ledger says %q (err %v), want a problem with %q", b.name, r, err, b.want)
			}
		}
		s.invariants(ctx)
	})
}

// on returns a copy of s that reports to t (a subtest).
func (s *testSystem) on(t *testing.T) *testSystem {
	c := *s
	c.t = t
	return &c
}

// stop stops p (SIGTERM) and fails the test when it does not stop in time.
func (s *testSystem) stop(p *system.Process) {
	s.t.Helper()
	if err := p.Stop(settle); err != nil {
		s.t.Fatalf("stop %s: %v", p.Name, err)
	}
}

// restart starts p again and waits until it is ready.
func (s *testSystem) restart(ctx context.Context, p *system.Process) {
	s.t.Helper()
	if err := s.sys.Restart(ctx, p, settle); err != nil {
		s.t.Fatalf("restart %s: %v", p.Name, err)
	}
}

// trackedProduct makes a fresh product tracked with onHand units.
func (s *testSystem) trackedProduct(ctx context.Context, onHand string) string {
	s.t.Helper()
	id := uuid.NewString()
	if err := s.api.PutStock(ctx, id, onHand); err != nil {
		s.t.Fatal(err)
	}
	return id
}

// placeOrder creates an order of lines and places it, failing the test
// (Errorf, so that it may run in any goroutine) unless both succeed; it returns
// the order's id.
func (s *testSystem) placeOrder(ctx context.Context, lines ...system.Line) string {
	o, err := s.api.CreateOrder(ctx, uuid.NewString(), lines)
	if err != nil {
		s.t.Errorf("create order: %v", err)
		return ""
	}
	if st, err := s.api.Place(ctx, o.ID); err != nil || st != http.StatusOK {
		s.t.Errorf("place %s: status %d, err %v", o.ID, st, err)
	}
	return o.ID
}

// cancel cancels order id and fails the test (Errorf) unless the API answers
// one of want.
func (s *testSystem) cancel(ctx context.Context, id string, want ...int) {
	st, err := s.api.Cancel(ctx, id)
	for _, w := range want {
		if err == nil && st == w {
			return
		}
	}
	s.t.Errorf("cancel %s: status %d, err %v; want %v", id, st, err, want)
}

// waitHeld waits until stock holds n reservations of order id.
func (s *testSystem) waitHeld(ctx context.Context, id string, n int) {
	s.t.Helper()
	eventually(s.t, "reservations of order "+id, func() string {
		rs, err := s.api.Reservations(ctx, id)
		if err != nil {
			return err.Error()
		}
		if held := system.Held(rs); len(held) != n {
			return fmt.Sprintf("%d held, want %d", len(held), n)
		}
		return ""
	})
}

// waitQueued waits until queue holds at least n messages.
func (s *testSystem) waitQueued(ctx context.Context, queue string, n int) {
	s.t.Helper()
	eventually(s.t, queue+" holds a message", func() string {
		d, err := system.QueueDepths(ctx, s.amqpURL, queue)
		if err != nil || d[queue] < n {
			return fmt.Sprintf("depth %v (err %v), want %d", d, err, n)
		}
		return ""
	})
}

// waitStockStatus waits until stock's copy of the order's status is status.
func (s *testSystem) waitStockStatus(ctx context.Context, id, status string) {
	s.t.Helper()
	eventually(s.t, "stock's copy of order "+id, func() string {
		var got string
		_ = s.dbs.Stock.QueryRow(ctx, `SELECT status FROM order_status WHERE order_id = $1`, id).Scan(&got)
		if got != status {
			return fmt.Sprintf("stock has %q", got)
		}
		return ""
	})
}

// endsCancelled waits until order id is cancelled everywhere: the order API
// says cancelled, stock holds nothing for it, shipping has it cancelled with a
// cancelled shipment, and order has consumed stock's answer when stock gave
// one. answer is the answer stock must have given: an event name, "" for none,
// "any" for either.
func (s *testSystem) endsCancelled(ctx context.Context, id, answer string) {
	s.t.Helper()
	o := s.waitOrderStatus(ctx, id, "cancelled")
	s.waitHeld(ctx, id, 0)
	s.waitShipping(ctx, id, "cancelled", o.Version, "cancelled")
	eventually(s.t, "stock's answer to order "+id+" consumed", func() string {
		var ids []string
		var name string
		_ = s.dbs.Stock.QueryRow(ctx, `SELECT coalesce(array_agg(id::text), '{}'), coalesce(min(event_name), '') FROM outbox
WHERE envelope->'payload'->>'order_id' = $1`, id).Scan(&ids, &name)
		answers := len(ids)
		var consumed int
		_ = s.dbs.Order.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE consumer = $1 AND message_key = ANY($2)`,
			contracts.ConsumerOrder, ids).Scan(&consumed)
		switch {
		case answer == "" && answers != 0:
			return fmt.Sprintf("stock answered %s, want no answer", name)
		case answer != "" && answer != "any" && (answers != 1 || name != answer):
			return fmt.Sprintf("stock answered %d times (%s), want one %s", answers, name, answer)
		case answers > 1:
			return fmt.Sprintf("stock answered %d times", answers)
		case consumed != answers:
			return fmt.Sprintf("order consumed %d of stock's %d answers", consumed, answers)
		}
		return ""
	})
	if got, _, err := s.api.Order(ctx, id); err != nil || got.Status != "cancelled" || got.Version != o.Version {
		s.t.Errorf("order %s = %+v (err %v), want it left cancelled at v%d", id, got, err, o.Version)
	}
}

// holdMessage takes one message from queue without acknowledging it, so that
// no consumer gets it, and returns the function that hands it back (requeued
// for the consumers).
func (s *testSystem) holdMessage(ctx context.Context, queue string) (release func()) {
	s.t.Helper()
	conn, err := amqp091.DialConfig(s.amqpURL, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		s.t.Fatalf("dial: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		s.t.Fatalf("channel: %v", err)
	}
	d, ok, err := ch.Get(queue, false)
	if err != nil || !ok {
		conn.Close()
		s.t.Fatalf("get from %s: ok %v, err %v", queue, ok, err)
	}
	s.t.Logf("holding %s (%s) taken from %s", d.MessageId, d.RoutingKey, queue)
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := d.Nack(false, true); err != nil {
				s.t.Errorf("requeue %s: %v", d.MessageId, err)
			}
			conn.Close()
		})
	}
	s.t.Cleanup(release)
	return release
}

// waitOrderStatus waits until the order API shows order id at status, at any
// version, and returns it.
func (s *testSystem) waitOrderStatus(ctx context.Context, id, status string) system.Order {
	s.t.Helper()
	var o system.Order
	eventually(s.t, "order "+id+" "+status, func() string {
		var err error
		o, _, err = s.api.Order(ctx, id)
		if err != nil || o.Status != status {
			return fmt.Sprintf("order %+v (err %v)", o, err)
		}
		return ""
	})
	return o
}

// copies starts n more processes like p (its binary, arguments and
// environment, plus env), each on a free port, waits until they are ready, and
// stops them when the test ends, failing it for a data race they report.
func (s *testSystem) copies(ctx context.Context, p *system.Process, n int, env ...string) []*system.Process {
	t := s.t
	t.Helper()
	ps := make([]*system.Process, n)
	for i := range ps {
		addr, err := testkit.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = &system.Process{
			Name: fmt.Sprintf("%s-%d", p.Name, i+2),
			Bin:  p.Bin,
			Args: p.Args,
			Env:  append(append(append([]string{}, p.Env...), env...), "HTTP_ADDR="+addr),
			Addr: addr,
			Log:  p.Log,
		}
	}
	t.Cleanup(func() {
		for _, p := range ps {
			if err := p.Stop(settle); err != nil {
				t.Errorf("stop %s: %v", p.Name, err)
			}
			if out := p.Output(); strings.Contains(out, "WARNING: DATA RACE") {
				t.Errorf("%s reported a data race:\n%s", p.Name, raceReport(out))
			} else if t.Failed() {
				t.Logf("last output of %s:\n%s", p.Name, tail(out, 30))
			}
		}
	})
	for _, p := range ps {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range ps {
		if err := p.WaitReady(ctx); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
	}
	return ps
}
