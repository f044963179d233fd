package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/testkit"
)

// TestDeadLetterReplayedFromItsRecord: stock's handler fails for one order (a
// trigger on order_status raises for it), so its placed event is dead-lettered
// after 5 attempts; then the copy in stock.events.dlq is purged, as an operator
// clearing a noisy queue would. The auditor counts the event as dead-lettered (not
// delivered, not unaccounted) and flags the missing copy; once the cause is gone,
// `stock dlq replay ID` puts the event back from the dead_letter record, stock
// applies it once, and the auditor counts it delivered.
func TestDeadLetterReplayedFromItsRecord(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{auditor: true, env: mergeEnv(auditorEnv(), map[string][]string{"stock": {"STOCK_MAX_ATTEMPTS=5"}})})
	ctx := testkit.Context(t)
	o := s.createOrder(ctx, 2)
	eventID := s.deadLetterPlaced(ctx, o)

	// rabbitmqctl purge_queue -p <vhost> stock.events.dlq
	conn, err := amqp091.Dial(s.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ch.QueuePurge(contracts.QueueStockDLQ, false); err != nil || n != 1 {
		t.Fatalf("purge %s: %d messages, %v", contracts.QueueStockDLQ, n, err)
	}

	eventually(t, "the auditor reports the event dead-lettered, its copy missing", func() string {
		r, err := s.api.Audit(ctx)
		if err != nil {
			return err.Error()
		}
		if r.DeadLettered["stock"] != 1 || r.DeadLetteredTotal != 1 || len(r.DeadLetters) != 1 || r.DeadLetters[0].EventID != eventID ||
			r.UnaccountedTotal != 0 || r.DeadLetterCopiesMissing["stock"] != 1 {
			return fmt.Sprintf("%+v", r)
		}
		return ""
	})
	for name, want := range map[string]float64{"delivery_dead_lettered_events": 1, "delivery_dead_letter_copies_missing": 1, "delivery_unaccounted_events": 0} {
		if v, err := s.sys.Auditor.Metric(ctx, name, map[string]string{"consumer": "stock"}); err != nil || v != want {
			t.Errorf(`%s{consumer="stock"} = %v (%v), want %v`, name, v, err, want)
		}
	}
	if v, err := s.sys.Auditor.Metric(ctx, "delivery_dead_letter_oldest_seconds", map[string]string{"consumer": "stock"}); err != nil || v <= 0 {
		t.Errorf(`delivery_dead_letter_oldest_seconds{consumer="stock"} = %v (%v), want > 0`, v, err)
	}

	dlq := s.stockDLQ(ctx)
	out, err := dlq("list")
	if err != nil || !strings.Contains(out, eventID) || !strings.Contains(out, "missing") {
		t.Errorf("dlq list: %v\n%s", err, out)
	}
	t.Logf("stock dlq list:\n%s", out)
	if _, err := s.dbs.Stock.Exec(ctx, `DROP TRIGGER fail_one_order ON order_status`); err != nil {
		t.Fatal(err)
	}
	out, err = dlq("replay", eventID)
	if err != nil || !strings.Contains(out, "replayed") || !strings.Contains(out, "no copy in "+contracts.QueueStockDLQ) {
		t.Fatalf("dlq replay: %v\n%s", err, out)
	}
	t.Logf("stock dlq replay:\n%s", out)
	s.waitReserved(ctx, o)
	s.invariants(ctx)
	var keys, reserved int
	if err := s.dbs.Stock.QueryRow(ctx, `SELECT (SELECT count(*) FROM processed_event WHERE message_key = $1),
	(SELECT count(*) FROM reservation WHERE order_id = $2)`, eventID, o.ID).Scan(&keys, &reserved); err != nil || keys != 1 || reserved != len(o.Lines) {
		t.Fatalf("after the replay: %d keys, %d reservations (%v); want 1 and %d", keys, reserved, err, len(o.Lines))
	}
	if out, err := dlq("replay", eventID); err != nil || !strings.Contains(out, "already replayed") {
		t.Errorf("second dlq replay: %v\n%s", err, out)
	}
	eventually(t, "the auditor counts the event delivered", func() string {
		r, err := s.api.Audit(ctx)
		if err != nil {
			return err.Error()
		}
		if r.DeadLetteredTotal != 0 || r.UnaccountedTotal != 0 || r.DeadLetterCopiesMissing["stock"] != 0 {
			return fmt.Sprintf("%+v", r)
		}
		return ""
	})
}

// TestDroppedDeadLetterStaysDropped: stock's placed event of an order is dead-lettered
// (a trigger fails it 5 times) and, the trigger gone, dropped with `stock dlq drop`;
// `order replay-outbox` then sends the event again, and stock skips it as a
// duplicate: the order stays placed at version 2, nothing is reserved, and the
// dead letter stays dropped.
func TestDroppedDeadLetterStaysDropped(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{env: map[string][]string{"stock": {"STOCK_MAX_ATTEMPTS=5"}}})
	ctx := testkit.Context(t)
	since := time.Now().Add(-time.Second)
	o := s.createOrder(ctx, 2)
	eventID := s.deadLetterPlaced(ctx, o)
	if _, err := s.dbs.Stock.Exec(ctx, `DROP TRIGGER fail_one_order ON order_status`); err != nil {
		t.Fatal(err)
	}
	out, err := s.stockDLQ(ctx)("drop", eventID)
	if err != nil {
		t.Fatalf("dlq drop: %v\n%s", err, out)
	}
	if !strings.Contains(out, "inbox key written as dropped") {
		t.Errorf("dlq drop printed:\n%s", out)
	}
	duplicates := s.metric(ctx, s.sys.Stock, "inbox_duplicates_total")

	cmd := exec.CommandContext(ctx, s.sys.OrderAPI.Bin, "replay-outbox", "--event-name", contracts.EventOrderPlaced,
		"--since", since.UTC().Format(time.RFC3339Nano), "--until", time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano))
	cmd.Env = append(os.Environ(),
		"ORDER_DATABASE_URL="+testkit.URLAs(t, s.dbs.Order.Config().ConnString(), "order_maintenance"))
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "replayed 1 published") {
		t.Fatalf("replay-outbox: %v\n%s", err, out)
	}
	eventually(t, "stock handles the replayed event", func() string {
		d := s.metric(ctx, s.sys.Stock, "inbox_duplicates_total") - duplicates
		if n := count(t, ctx, s.dbs.Stock, `SELECT count(*) FROM reservation WHERE order_id = $1`, o.ID); d < 1 && n == 0 {
			return fmt.Sprintf("%v duplicates since the drop, nothing reserved either", d)
		}
		return ""
	})
	var status, resolution string
	var version, reserved int
	if err := s.dbs.Order.QueryRow(ctx, `SELECT status, version FROM orders WHERE id = $1`, o.ID).Scan(&status, &version); err != nil {
		t.Fatal(err)
	}
	if err := s.dbs.Stock.QueryRow(ctx, `SELECT (SELECT count(*) FROM reservation WHERE order_id = $1),
	(SELECT resolution FROM dead_letter WHERE message_key = $2)`, o.ID, eventID).Scan(&reserved, &resolution); err != nil {
		t.Fatal(err)
	}
	if status != "placed" || version != 2 || reserved != 0 || resolution != "dropped" {
		t.Errorf("after the replay: order %s v%d, %d reservations, dead letter %s; want placed v2, none, dropped",
			status, version, reserved, resolution)
	}
}

// deadLetterPlaced makes stock fail o (a trigger on order_status raises for it),
// places o and waits until stock dead-letters its placed event after 5 attempts,
// with its copy in stock.events.dlq; it returns the event's id.
func (s *testSystem) deadLetterPlaced(ctx context.Context, o system.Order) string {
	s.t.Helper()
	_, err := s.dbs.Stock.Exec(ctx, fmt.Sprintf(`CREATE FUNCTION fail_one_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.order_id = '%s' THEN RAISE EXCEPTION 'order %% is broken on purpose', NEW.order_id; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER fail_one_order BEFORE INSERT OR UPDATE ON order_status FOR EACH ROW EXECUTE FUNCTION fail_one_order();`, o.ID))
	if err != nil {
		s.t.Fatal(err)
	}
	s.place(ctx, o.ID, 200)
	var eventID string
	if err := s.dbs.Order.QueryRow(ctx, `SELECT id::text FROM outbox WHERE envelope->'payload'->>'order_id' = $1 AND event_name = $2`,
		o.ID, contracts.EventOrderPlaced).Scan(&eventID); err != nil {
		s.t.Fatal(err)
	}
	eventually(s.t, "the event dead-lettered after 5 attempts, its copy in stock.events.dlq", func() string {
		var attempts int
		err := s.dbs.Stock.QueryRow(ctx, `SELECT attempts FROM dead_letter WHERE message_key = $1 AND resolved_at IS NULL`, eventID).Scan(&attempts)
		if err != nil {
			return err.Error()
		}
		d, err := system.QueueDepths(ctx, s.amqpURL, contracts.QueueStockDLQ)
		if err != nil || attempts != 5 || d[contracts.QueueStockDLQ] != 1 {
			return fmt.Sprintf("attempts %d, %v in the dead-letter queue (%v)", attempts, d, err)
		}
		return ""
	})
	return eventID
}

// stockDLQ returns a runner of the `stock dlq` binary as stock_maintenance and the
// shop's broker user: its combined output and error.
func (s *testSystem) stockDLQ(ctx context.Context) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, s.sys.Stock.Bin, append([]string{"dlq"}, args...)...)
		cmd.Env = append(os.Environ(), "AMQP_URL="+s.amqpURL,
			"STOCK_DATABASE_URL="+testkit.URLAs(s.t, s.dbs.Stock.Config().ConnString(), "stock_maintenance"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

// mergeEnv joins per-process environments.
func mergeEnv(envs ...map[string][]string) map[string][]string {
	out := map[string][]string{}
	for _, e := range envs {
		for k, v := range e {
			out[k] = append(out[k], v...)
		}
	}
	return out
}
