package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/platform/amqp"
)

// consumerCounts are the delivery counters of one consumer's /metrics.
type consumerCounts struct {
	processed, failures, retries, dead, duplicates, inFlight float64
}

func (d *demo) consumerCounts(ctx context.Context, p *system.Process) (consumerCounts, error) {
	var c consumerCounts
	for _, m := range []struct {
		name string
		dst  *float64
	}{
		{"amqp_consumer_processed_total", &c.processed},
		{"amqp_consumer_failures_total", &c.failures},
		{"amqp_consumer_retries_total", &c.retries},
		{"amqp_consumer_dead_lettered_total", &c.dead},
		{"inbox_duplicates_total", &c.duplicates},
		{"amqp_consumer_in_flight", &c.inFlight},
	} {
		v, err := p.Metric(ctx, m.name, nil)
		if err != nil {
			return c, err
		}
		*m.dst = v
	}
	return c, nil
}

// drain waits until the consumers' queues and retry queues hold no ready message,
// no delivery is being handled, and the consumers' counters stayed the same for a
// whole second. Without the management plugin the broker does not tell how many
// messages are delivered but unacknowledged; a delivery sent ahead (prefetch)
// reaches an idle worker at once, so no handler running and no counter moving for
// a second means none is left, and the duplicate counts are final.
func (d *demo) drain(ctx context.Context) error {
	consumers := contracts.Consumers()
	var queues []string
	for _, c := range consumers {
		queues = append(queues, c.Queue)
		for _, delay := range amqp.DefaultRetryDelays() {
			queues = append(queues, amqp.RetryQueueName(c.Queue, delay))
		}
	}
	last := make([]consumerCounts, len(consumers))
	stableSince := time.Time{}
	return waitFor(ctx, "queues drained", func() string {
		depths, _ := system.QueueDepths(ctx, d.srv.amqpURL, queues...) // missing retry queues are not an error here
		ready := 0
		for _, n := range depths {
			ready += n
		}
		now := make([]consumerCounts, len(consumers))
		inFlight := false
		for i, c := range consumers {
			cc, err := d.consumerCounts(ctx, d.sys.Process(c.Name))
			if err != nil {
				return err.Error()
			}
			now[i] = cc
			inFlight = inFlight || cc.inFlight > 0
		}
		switch {
		case ready > 0:
			stableSince = time.Time{}
			return fmt.Sprintf("%d messages ready", ready)
		case inFlight:
			stableSince = time.Time{}
			return "deliveries in flight"
		case !slices.Equal(now, last) || stableSince.IsZero():
			last, stableSince = now, time.Now()
			return "counters still moving"
		case time.Since(stableSince) < time.Second:
			return "counters still moving"
		}
		var names, counts []string
		for i, c := range consumers {
			names = append(names, c.Queue)
			counts = append(counts, fmt.Sprintf("%s %.0f deliveries (%.0f duplicates)", c.Name, now[i].processed, now[i].duplicates))
		}
		d.ui.say("%s empty, no delivery in flight, counters still for 1 s", strings.Join(names, ", "))
		d.ui.say("processed: %s", strings.Join(counts, ", "))
		return ""
	})
}

// audit asks the auditor (GET /audit), not the databases, whether a published event
// is unaccounted for: it waits until the audit has checked every event the outbox
// published, then requires unaccounted = 0.
func (d *demo) audit(ctx context.Context) error {
	published := 0 // the auditor walks every producer's outbox
	for _, p := range contracts.Producers() {
		pool, err := d.dbs.Of(p.Name)
		if err != nil {
			return err
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`).Scan(&n); err != nil {
			return err
		}
		published += n
	}
	var r system.AuditReport
	if err := waitFor(ctx, "the audit", func() string {
		var err error
		if r, err = d.api.Audit(ctx); err != nil {
			return err.Error()
		}
		if r.Audited < int64(published) {
			return fmt.Sprintf("audited %d of %d published events", r.Audited, published)
		}
		return ""
	}); err != nil {
		return err
	}
	d.auditReport = r
	var unaccounted []string
	for _, c := range contracts.Consumers() {
		unaccounted = append(unaccounted, fmt.Sprintf("%s %d", c.Name, r.Unaccounted[c.Name]))
	}
	d.ui.say("GET http://%s/audit: %d published events checked, unaccounted: %s",
		d.sys.Auditor.Addr, r.Audited, strings.Join(unaccounted, ", "))
	if r.UnaccountedTotal != 0 {
		var ids []string
		for _, e := range r.Events {
			ids = append(ids, e.EventID+" ("+strings.Join(e.Consumers, ", ")+")")
		}
		return fmt.Errorf("the auditor finds %d unaccounted events: %s", r.UnaccountedTotal, strings.Join(ids, "; "))
	}
	d.ui.say("each has its processed_event key in every consumer that receives it, or sits in a dead-letter queue")
	return nil
}

// duplicatesNote explains the duplicate counts (by consumer name) of the consumers
// of order.order.placed.v1, the event republished by hand and re-sent after the
// relay crash.
func duplicatesNote(dups map[string]float64, byHand int) string {
	receivers := contracts.ConsumersOf(contracts.EventOrderPlaced)
	for _, c := range receivers {
		if dups[c.Name] != dups[receivers[0].Name] {
			return fmt.Sprintf("%s differ: besides the copies each of their queues got (%d by hand, the rest from the relay crash), "+
				"a consumer redelivered a message of its own (its ack lost on a reconnect)", strings.Join(consumerNames(receivers), ", "), byHand)
		}
	}
	return fmt.Sprintf("%s equal: their queues got the same copies (%d republished by hand, the rest re-sent after the relay crash)",
		strings.Join(consumerNames(receivers), ", "), byHand)
}
