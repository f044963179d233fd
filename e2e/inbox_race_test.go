package e2e_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/testkit"
)

// TestEightConsumersRaceOverTripledMessages is the inbox's race with real
// processes (docs/inbox.md): eight `stock serve` processes consume one queue
// through the real broker while 60 placed events arrive three times each, the
// copies of one event one after another so that they land on different
// processes at the same moment. Every event is applied exactly once: 60
// processed_event keys, each order's lines reserved once, and across the eight
// processes 60 processed and 120 duplicates, no conflict, no failure.
func TestEightConsumersRaceOverTripledMessages(t *testing.T) {
	t.Parallel()
	const processes, events, copies = 8, 60, 3
	s := newShop(t, options{})
	ctx := testkit.Context(t)

	// The relay stays stopped: the test publishes the outbox itself, three times.
	if err := s.sys.Relay.Stop(settle); err != nil {
		t.Fatalf("stop the relay: %v", err)
	}
	orders := make([]system.Order, events)
	for n := range orders {
		orders[n] = s.createOrder(ctx, 1+n%3)
		s.place(ctx, orders[n].ID, http.StatusOK)
	}

	// Eight stock processes replace the one of the shop, on its database and queue.
	if err := s.sys.Stock.Stop(settle); err != nil {
		t.Fatalf("stop stock: %v", err)
	}
	stocks := s.copies(ctx, s.sys.Stock, processes, "STOCK_WORKERS=4")

	rows, err := s.dbs.Order.Query(ctx, `SELECT id::text, event_name, envelope::text FROM outbox ORDER BY occurred_at, id`)
	if err != nil {
		t.Fatalf("read the outbox: %v", err)
	}
	type message struct{ id, name, body string }
	var outbox []message
	for rows.Next() {
		var m message
		if err := rows.Scan(&m.id, &m.name, &m.body); err != nil {
			t.Fatal(err)
		}
		outbox = append(outbox, m)
	}
	if err := rows.Err(); err != nil || len(outbox) != events {
		t.Fatalf("outbox: %d events (%v), want %d", len(outbox), err, events)
	}
	// Four publishers, each sending its share of the events, every copy of an event
	// right after the other.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range errs {
		wg.Go(func() {
			for n := w; n < len(outbox); n += len(errs) {
				m := outbox[n]
				for range copies {
					if err := system.Publish(ctx, s.asRelayOf(m.name), contracts.Exchange, m.name, m.id, []byte(m.body)); err != nil {
						errs[w] = err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
	}

	sum := func(name string) float64 {
		var total float64
		for _, p := range stocks {
			v, err := p.Metric(ctx, name, map[string]string{"consumer": "stock"})
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			total += v
		}
		return total
	}
	eventually(t, "every copy handled by the eight processes", func() string {
		processed, dups := sum("inbox_processed_total"), sum("inbox_duplicates_total")
		if processed+dups < events*copies {
			return fmt.Sprintf("processed %v + duplicates %v < %d", processed, dups, events*copies)
		}
		return ""
	})
	if processed, dups, conflicts, failures := sum("inbox_processed_total"), sum("inbox_duplicates_total"),
		sum("inbox_conflicts_total"), sum("inbox_failures_total"); processed != events || dups != events*(copies-1) || conflicts != 0 || failures != 0 {
		t.Errorf("across the processes: processed %v, duplicates %v, conflicts %v, failures %v; want %d, %d, 0, 0",
			processed, dups, conflicts, failures, events, events*(copies-1))
	}
	busy := 0
	for _, p := range stocks {
		v, err := p.Metric(ctx, "inbox_processed_total", map[string]string{"consumer": "stock"})
		if err == nil && v > 0 {
			busy++
		}
	}
	t.Logf("%d of %d processes applied events", busy, processes)

	if n := count(t, ctx, s.dbs.Stock, `SELECT count(*) FROM processed_event`); n != events {
		t.Errorf("stock processed_event rows = %d, want %d", n, events)
	}
	for _, o := range orders {
		var lines, distinct int
		if err := s.dbs.Stock.QueryRow(ctx, `SELECT count(*), count(DISTINCT product_id) FROM reservation WHERE order_id = $1`, o.ID).
			Scan(&lines, &distinct); err != nil {
			t.Fatal(err)
		}
		if lines != len(o.Lines) || distinct != len(o.Lines) {
			t.Errorf("order %s: %d reservations (%d products), want its %d lines once each", o.ID, lines, distinct, len(o.Lines))
		}
	}
	s.waitProcessed(ctx, "shipping", events)
	if n := count(t, ctx, s.dbs.Shipping, `SELECT count(*) FROM processed_event`); n != events {
		t.Errorf("shipping processed_event rows = %d, want %d", n, events)
	}
	if depths, err := system.QueueDepths(ctx, s.amqpURL, "stock.events.dlq"); err != nil || depths["stock.events.dlq"] != 0 {
		t.Errorf("stock dead-letter queue = %v (%v), want empty", depths, err)
	}
}
