package auditor_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/auditor"
)

func newAudit(t *testing.T, w *world, cfg auditor.Config) (*auditor.Audit, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Grace == 0 {
		cfg.Grace = time.Minute
	}
	if cfg.Window == 0 {
		cfg.Window = time.Hour
	}
	a, err := auditor.New(w.st, cfg, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return a, reg
}

func cycle(t *testing.T, a *auditor.Audit) auditor.Report {
	t.Helper()
	if err := a.Cycle(context.Background()); err != nil {
		t.Fatalf("cycle: %v", err)
	}
	return a.Report()
}

func gauge(t *testing.T, reg *prometheus.Registry, consumer string) float64 {
	t.Helper()
	return metric(t, reg, "delivery_unaccounted_events", consumer)
}

func metric(t *testing.T, reg *prometheus.Registry, name, consumer string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() == consumer {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{consumer=%q}", name, consumer)
	return 0
}

// placed writes a placed order whose event was published `ago` ago, processed by the
// given consumers.
func placed(t *testing.T, w *world, ago time.Duration, processedBy ...string) (order, event uuid.UUID) {
	t.Helper()
	at := time.Now().Add(-ago)
	order = w.newOrder(t, at.Add(-10*time.Millisecond))
	event = w.event(t, order, contracts.EventOrderPlaced, 2, at, ptr(at.Add(5*time.Millisecond)))
	for _, c := range processedBy {
		w.process(t, c, event, at.Add(20*time.Millisecond))
	}
	return order, event
}

func TestAuditCountsAnEventAConsumerNeverProcessed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, reg := newAudit(t, w, auditor.Config{})
	placed(t, w, 10*time.Minute, contracts.ConsumerStock, contracts.ConsumerShipping)
	_, gap := placed(t, w, 9*time.Minute, contracts.ConsumerStock) // shipping never got it

	r := cycle(t, a)
	if r.Unaccounted[contracts.ConsumerShipping] != 1 || r.Unaccounted[contracts.ConsumerStock] != 0 || r.UnaccountedTotal != 1 {
		t.Fatalf("report %+v, want shipping 1, stock 0", r)
	}
	if len(r.Events) != 1 || r.Events[0].EventID != gap || len(r.Events[0].Consumers) != 1 || r.Events[0].Consumers[0] != contracts.ConsumerShipping {
		t.Fatalf("findings %+v, want event %s missing in shipping", r.Events, gap)
	}
	if g := gauge(t, reg, contracts.ConsumerShipping); g != 1 {
		t.Fatalf("delivery_unaccounted_events{consumer=shipping} = %v, want 1", g)
	}
	if r.Audited != 2 {
		t.Fatalf("audited %d, want 2", r.Audited)
	}

	// Processed late (a replay, say): accounted for at the next cycle.
	w.process(t, contracts.ConsumerShipping, gap, time.Now())
	if r := cycle(t, a); r.UnaccountedTotal != 0 {
		t.Fatalf("after the late key: %+v", r)
	}
	if g := gauge(t, reg, contracts.ConsumerShipping); g != 0 {
		t.Fatalf("gauge %v after the late key", g)
	}
}

func TestAuditWindowFindsAKeyDeletedAfterTheFirstCheck(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, reg := newAudit(t, w, auditor.Config{Window: 30 * time.Minute})
	_, ev := placed(t, w, 5*time.Minute, contracts.ConsumerStock, contracts.ConsumerShipping)
	if r := cycle(t, a); r.UnaccountedTotal != 0 || r.Audited != 1 {
		t.Fatalf("first cycle: %+v", r)
	}
	w.forget(t, contracts.ConsumerStock, ev)
	r := cycle(t, a)
	if r.Unaccounted[contracts.ConsumerStock] != 1 || r.Audited != 1 {
		t.Fatalf("after deleting stock's key: %+v, want stock 1 (found by the window, not the forward pass)", r)
	}
	if g := gauge(t, reg, contracts.ConsumerStock); g != 1 {
		t.Fatalf("gauge %v", g)
	}
}

func TestAuditOutsideTheWindowDoesNotRecheck(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := newAudit(t, w, auditor.Config{Window: 2 * time.Minute})
	_, ev := placed(t, w, 5*time.Minute, contracts.ConsumerStock, contracts.ConsumerShipping)
	cycle(t, a)
	w.forget(t, contracts.ConsumerStock, ev)
	if r := cycle(t, a); r.UnaccountedTotal != 0 {
		t.Fatalf("an event older than the window was checked again: %+v", r)
	}
}

func TestAuditWaitsForTheGraceAndTheRelay(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := newAudit(t, w, auditor.Config{Grace: time.Minute})
	// Published 10 s ago and not processed yet: in flight or in retry, not missing.
	placed(t, w, 10*time.Second)
	// Occurred long ago but not published: the relay's business, not yet the audit's.
	old := time.Now().Add(-10 * time.Minute)
	order := w.newOrder(t, old)
	unpublished := w.event(t, order, contracts.EventOrderPlaced, 2, old, nil)

	r := cycle(t, a)
	if r.UnaccountedTotal != 0 || r.Audited != 0 {
		t.Fatalf("report %+v: nothing should be audited yet", r)
	}
	if r.LagSeconds < 9*60 {
		t.Fatalf("lag %.0f s, want the age of the unpublished event (about 600 s)", r.LagSeconds)
	}
	// The relay publishes it now: still within the grace.
	w.exec(t, w.order, `UPDATE outbox SET published_at = now() WHERE id = $1`, unpublished)
	if r := cycle(t, a); r.UnaccountedTotal != 0 {
		t.Fatalf("report %+v", r)
	}
}

// TestAuditCountsOpenDeadLettersAsNotDelivered: an open dead letter is not
// delivered; it is counted apart from the unaccounted events, with the age of the
// oldest, until it is replayed (and processed) or dropped; a dead letter whose copy
// is gone from the dead-letter queue is flagged.
func TestAuditCountsOpenDeadLettersAsNotDelivered(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	// The dead_letter table each consumer keeps (docs/operations.md).
	for _, p := range []string{contracts.ConsumerStock, contracts.ConsumerShipping} {
		w.exec(t, w.db(p), `CREATE TABLE IF NOT EXISTS dead_letter (
	id bigserial PRIMARY KEY, consumer text NOT NULL, message_key text NOT NULL, event_id uuid NULL,
	event_name text NOT NULL, reason text NOT NULL, attempts integer NOT NULL,
	dead_lettered_at timestamptz NOT NULL DEFAULT now(), resolved_at timestamptz NULL, resolution text NULL)`)
	}
	depths := map[string]int{contracts.QueueStockDLQ: 0, contracts.QueueShippingDLQ: 0}
	a, reg := newAudit(t, w, auditor.Config{QueueDepths: func(_ context.Context, qs ...string) (map[string]int, error) {
		out := map[string]int{}
		for _, q := range qs {
			out[q] = depths[q]
		}
		return out, nil
	}})
	_, dead := placed(t, w, 10*time.Minute, contracts.ConsumerShipping)
	_, dropped := placed(t, w, 9*time.Minute, contracts.ConsumerShipping)
	_, replayed := placed(t, w, 8*time.Minute, contracts.ConsumerShipping)
	ins := `INSERT INTO dead_letter (consumer, message_key, event_id, event_name, reason, attempts, dead_lettered_at, resolved_at, resolution)
VALUES ('stock', $1::text, $1::text::uuid, 'order.order.placed.v1', 'handler: boom', 5, now() - interval '7 minutes', $2, $3)`
	w.exec(t, w.stock, ins, dead.String(), nil, nil)
	w.exec(t, w.stock, ins, dropped.String(), time.Now().Add(-time.Minute), "dropped")
	w.exec(t, w.stock, ins, replayed.String(), time.Now().Add(-5*time.Minute), "replayed")

	r := cycle(t, a)
	if r.UnaccountedTotal != 1 || r.Events[0].EventID != replayed {
		t.Fatalf("report %+v: want only the replayed event (replayed 5 min ago, still no key) unaccounted", r)
	}
	if r.DeadLetteredTotal != 1 || r.DeadLettered[contracts.ConsumerStock] != 1 || len(r.DeadLetters) != 1 ||
		r.DeadLetters[0].EventID != dead || r.DeadLetters[0].Consumer != contracts.ConsumerStock || r.DeadLetters[0].Reason != "handler: boom" {
		t.Fatalf("report %+v: want the open dead letter counted as dead-lettered, awaiting a decision", r)
	}
	if g := metric(t, reg, "delivery_dead_lettered_events", contracts.ConsumerStock); g != 1 {
		t.Errorf("delivery_dead_lettered_events{stock} = %v, want 1", g)
	}
	if g := metric(t, reg, "delivery_dead_letter_oldest_seconds", contracts.ConsumerStock); g < 7*60 || g > 8*60 {
		t.Errorf("delivery_dead_letter_oldest_seconds{stock} = %v, want about 420", g)
	}
	if r.DeadLetterCopiesMissing[contracts.ConsumerStock] != 1 || metric(t, reg, "delivery_dead_letter_copies_missing", contracts.ConsumerStock) != 1 {
		t.Errorf("copies missing %v, want stock 1 (1 open, an empty queue)", r.DeadLetterCopiesMissing)
	}
	depths[contracts.QueueStockDLQ] = 1
	if r := cycle(t, a); r.DeadLetterCopiesMissing[contracts.ConsumerStock] != 0 {
		t.Errorf("copies missing %v with the copy in the queue, want stock 0", r.DeadLetterCopiesMissing)
	}
	j, err := auditor.NewJourneys(w.st, time.Minute).Event(context.Background(), dead)
	if err != nil {
		t.Fatal(err)
	}
	d := j.Events[0].Deliveries[0]
	if d.Consumer != contracts.ConsumerStock || d.State != auditor.StateDeadLettered || d.State.Accounted() || d.DeadLetter == nil || d.DeadLetter.Reason != "handler: boom" {
		t.Fatalf("delivery %+v, want stock dead_lettered (handler: boom), not accounted", d)
	}

	// Replayed and processed: delivered.
	w.exec(t, w.stock, `UPDATE dead_letter SET resolved_at = now(), resolution = 'replayed' WHERE message_key = $1`, dead.String())
	w.process(t, contracts.ConsumerStock, dead, time.Now())
	r = cycle(t, a)
	if r.DeadLetteredTotal != 0 || metric(t, reg, "delivery_dead_lettered_events", contracts.ConsumerStock) != 0 ||
		metric(t, reg, "delivery_dead_letter_oldest_seconds", contracts.ConsumerStock) != 0 {
		t.Fatalf("report %+v after the replay, want no dead letter", r)
	}
}

// TestAuditForgetsFindingsOfPurgedEvents: a finding inside the window whose outbox
// row is purged is forgotten at the next cycle.
func TestAuditForgetsFindingsOfPurgedEvents(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := newAudit(t, w, auditor.Config{})
	_, gap := placed(t, w, 10*time.Minute, contracts.ConsumerStock)
	if r := cycle(t, a); r.UnaccountedTotal != 1 {
		t.Fatalf("report %+v, want 1 unaccounted", r)
	}
	w.exec(t, w.order, `DELETE FROM outbox WHERE id = $1`, gap)
	if r := cycle(t, a); r.UnaccountedTotal != 0 || len(r.Events) != 0 || r.Unaccounted[contracts.ConsumerShipping] != 0 {
		t.Fatalf("report %+v after the purge, want the finding forgotten", r)
	}
}

func TestAuditPagesThroughABacklogInBoundedCycles(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := newAudit(t, w, auditor.Config{PageSize: 100, PagesPerCycle: 2})
	start := time.Now().Add(-time.Hour)
	order := w.newOrder(t, start)
	// 450 published events, one a millisecond, each processed by both consumers,
	// written with one statement per table.
	w.exec(t, w.order, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
SELECT id, 'order.order.placed.v1', 'order.order.placed.v1',
	jsonb_build_object('payload', jsonb_build_object('order_id', $1::text, 'version', 2)), at, at
FROM (SELECT (lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0') || '7000' || '8000' || lpad(to_hex(n), 12, '0'))::uuid AS id, at
	FROM (SELECT n, $2::timestamptz + n * interval '1 millisecond' AS at FROM generate_series(1, 450) AS n) s) e`, order, start)
	for _, c := range []string{contracts.ConsumerStock, contracts.ConsumerShipping} {
		rows, err := w.order.Query(context.Background(), `SELECT id FROM outbox`)
		if err != nil {
			t.Fatal(err)
		}
		var ids []uuid.UUID
		for rows.Next() {
			var id uuid.UUID
			_ = rows.Scan(&id)
			ids = append(ids, id)
		}
		rows.Close()
		w.exec(t, w.db(c), `INSERT INTO processed_event (consumer, message_key) SELECT $1, unnest($2::uuid[])::text`, c, ids)
	}
	for i, want := range []int64{200, 400, 450, 450} {
		r := cycle(t, a)
		if r.Audited != want || r.UnaccountedTotal != 0 {
			t.Fatalf("cycle %d: audited %d (want %d), unaccounted %d", i+1, r.Audited, want, r.UnaccountedTotal)
		}
		if want < 450 && r.LagSeconds < 3000 {
			t.Fatalf("cycle %d: lag %.0f s, want about an hour while the backlog lasts", i+1, r.LagSeconds)
		}
		if want == 450 && r.LagSeconds != 0 {
			t.Fatalf("cycle %d: lag %.1f s after catching up, want 0", i+1, r.LagSeconds)
		}
	}
}
