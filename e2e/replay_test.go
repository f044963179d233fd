package e2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/testkit"
)

// TestReplayOutboxIsAbsorbedByTheConsumers places 200 orders, waits until both
// consumers processed their events, then runs `order replay-outbox --event-name
// order.order.placed.v1` (as order_maintenance) over the period: the relay
// publishes the 200 placed events again
// with their event ids, each consumer counts 200 duplicates, and nothing else
// changes: no new key, reservation or shipment, no new processed event.
func TestReplayOutboxIsAbsorbedByTheConsumers(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{})
	ctx := testkit.Context(t)
	const n = 200

	since := time.Now().Add(-time.Second)
	s.placeMany(ctx, n, 8, nil)
	s.waitProcessed(ctx, "stock", n)
	s.waitProcessed(ctx, "shipping", n)
	s.invariants(ctx)
	until := time.Now().Add(time.Second)
	eventually(t, "every event published", func() string {
		if c := count(t, ctx, s.dbs.Order, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); c > 0 {
			return fmt.Sprintf("%d events not published yet", c)
		}
		return ""
	})

	type snapshot struct{ keys, effects, processed, duplicates float64 }
	take := func() (stock, shipping snapshot) {
		stock = snapshot{
			keys:       float64(count(t, ctx, s.dbs.Stock, `SELECT count(*) FROM processed_event`)),
			effects:    float64(count(t, ctx, s.dbs.Stock, `SELECT count(*) FROM reservation`)),
			processed:  s.metric(ctx, s.sys.Stock, "inbox_processed_total"),
			duplicates: s.metric(ctx, s.sys.Stock, "inbox_duplicates_total"),
		}
		shipping = snapshot{
			keys:       float64(count(t, ctx, s.dbs.Shipping, `SELECT count(*) FROM processed_event`)),
			effects:    float64(count(t, ctx, s.dbs.Shipping, `SELECT count(*) FROM shipment`)),
			processed:  s.metric(ctx, s.sys.Shipping, "inbox_processed_total"),
			duplicates: s.metric(ctx, s.sys.Shipping, "inbox_duplicates_total"),
		}
		return stock, shipping
	}
	stock0, shipping0 := take()
	// Shipping also holds the keys of the 200 confirmations.
	if stock0.keys != n || shipping0.keys != 2*n || stock0.effects != 2*n || shipping0.effects != n {
		t.Fatalf("before the replay: stock %+v, shipping %+v; want %d and %d keys, %d reservations, %d shipments",
			stock0, shipping0, n, 2*n, 2*n, n)
	}

	cmd := exec.CommandContext(ctx, s.sys.OrderAPI.Bin, "replay-outbox", "--event-name", contracts.EventOrderPlaced,
		"--since", since.UTC().Format(time.RFC3339Nano), "--until", until.UTC().Format(time.RFC3339Nano))
	cmd.Env = append(os.Environ(),
		"ORDER_DATABASE_URL="+testkit.URLAs(t, s.dbs.Order.Config().ConnString(), "order_maintenance"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("replay-outbox: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("replayed %d published %s events", n, contracts.EventOrderPlaced)) {
		t.Fatalf("replay-outbox printed:\n%s", out)
	}

	eventually(t, "both consumers count the 200 duplicates", func() string {
		st := s.metric(ctx, s.sys.Stock, "inbox_duplicates_total")
		sh := s.metric(ctx, s.sys.Shipping, "inbox_duplicates_total")
		if st-stock0.duplicates < n || sh-shipping0.duplicates < n {
			return fmt.Sprintf("duplicates since the replay: stock %v, shipping %v", st-stock0.duplicates, sh-shipping0.duplicates)
		}
		return ""
	})
	stock1, shipping1 := take()
	for _, c := range []struct {
		name          string
		before, after snapshot
	}{{"stock", stock0, stock1}, {"shipping", shipping0, shipping1}} {
		if c.after.duplicates-c.before.duplicates != n {
			t.Errorf("%s counted %v duplicates, want %d", c.name, c.after.duplicates-c.before.duplicates, n)
		}
		if c.after.keys != c.before.keys || c.after.effects != c.before.effects || c.after.processed != c.before.processed {
			t.Errorf("%s changed after the replay: before %+v, after %+v; want no new key, effect or processed event",
				c.name, c.before, c.after)
		}
	}
	if got := count(t, ctx, s.dbs.Order, `SELECT count(*) FROM outbox WHERE replays = 1 AND published_at IS NOT NULL AND event_name = $1`,
		contracts.EventOrderPlaced); got != n {
		t.Errorf("%d placed events replayed once and published again, want %d", got, n)
	}
	if got := count(t, ctx, s.dbs.Order, `SELECT count(*) FROM outbox`); got != 2*n {
		t.Errorf("%d outbox rows, want %d (placed, confirmed): a replay adds no row", got, 2*n)
	}
	s.invariants(ctx)
}
