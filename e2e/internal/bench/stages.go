package bench

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
)

// Stages of place -> reservation, each measured per order from the
// timestamps the system already writes, on one machine clock:
//
//	api      POST /orders/{id}/place sent -> answered (the client's clock)
//	pickup   occurred_at (set by the API before its commit) -> published_at
//	         (now() of the relay's batch transaction, which starts when the
//	         relay wakes up): the API's commit, the NOTIFY and the wake-up
//	confirm  relay_confirm_latency_seconds of the relay: one batch's publish
//	         -> its last confirm (per batch, read from its histogram)
//	deliver  published_at -> processed_at (now() of stock's inbox
//	         transaction): select, publish, broker routing and queue write,
//	         delivery, the consumer's wait for an inbox transaction
//	consume  processed_at -> the reservation's commit seen by the bench
//	         trigger: the inbox transaction, its commit and the NOTIFY
//
// and of the answer leg, reservation -> order confirmed:
//
//	answer_pickup   the answer's occurred_at (set in the reservation's
//	                transaction, before its commit) -> its published_at: the
//	                commit, the NOTIFY and the stock relay's wake-up
//	answer_confirm  relay_confirm_latency_seconds of the stock relay
//	answer_deliver  the answer's published_at -> processed_at of order's key
//	apply           processed_at -> the confirmation's commit seen by the
//	                bench trigger: order's inbox transaction and its commit
var stageNames = []string{"api", "pickup", "confirm", "deliver", "consume",
	"answer_pickup", "answer_confirm", "answer_deliver", "apply"}

// histogramStages are the stages read from a relay's histogram, not per order.
var histogramStages = map[string]bool{"confirm": true, "answer_confirm": true}

func stageName(stage, p string) string { return "latency_stage_" + stage + "_" + p }

// stageTimes returns, per stage but those of histogramStages, the sorted
// durations of the orders in ids (their placements answered after
// answered[i]; reserved when w saw it, confirmed when wc did).
func stageTimes(ctx context.Context, orderURL, stockURL string, ids []string, answered []time.Duration, w, wc *watcher) (map[string][]time.Duration, error) {
	oconn, err := pgx.Connect(ctx, orderURL)
	if err != nil {
		return nil, err
	}
	defer oconn.Close(context.WithoutCancel(ctx))
	sconn, err := pgx.Connect(ctx, stockURL)
	if err != nil {
		return nil, err
	}
	defer sconn.Close(context.WithoutCancel(ctx))
	out := map[string][]time.Duration{"api": slices.Sorted(slices.Values(answered))}
	for _, leg := range []struct {
		stages             [3]string // pickup, deliver, and the end the watcher sees
		producer, consumer *pgx.Conn
		events             []string
		end                *watcher
	}{
		{[3]string{"pickup", "deliver", "consume"}, oconn, sconn, []string{contracts.EventOrderPlaced}, w},
		{[3]string{"answer_pickup", "answer_deliver", "apply"}, sconn, oconn,
			[]string{contracts.EventStockReservationConfirmed, contracts.EventStockReservationRejected}, wc},
	} {
		pickup, deliver, end, err := legTimes(ctx, leg.producer, leg.consumer, leg.events, ids, leg.end)
		if err != nil {
			return nil, err
		}
		for i, d := range [][]time.Duration{pickup, deliver, end} {
			if len(d) != len(ids) {
				return nil, fmt.Errorf("stage %s: %d of %d orders found", leg.stages[i], len(d), len(ids))
			}
			out[leg.stages[i]] = slices.Sorted(slices.Values(d))
		}
	}
	return out, nil
}

// legTimes returns, for each order of ids, one leg's three stages: its event (one
// of events, in producer's outbox) from occurred_at to published_at (pickup), from
// published_at to processed_at of its key in consumer's processed_event (deliver),
// and from then to the commit end saw. An event not yet marked published is an
// error.
func legTimes(ctx context.Context, producer, consumer *pgx.Conn, events, ids []string, end *watcher) (pickup, deliver, done []time.Duration, err error) {
	rows, err := producer.Query(ctx, `SELECT id::text, envelope->'payload'->>'order_id', occurred_at, published_at FROM outbox
		WHERE event_name = ANY($1) AND envelope->'payload'->>'order_id' = ANY($2)`, events, ids)
	if err != nil {
		return nil, nil, nil, err
	}
	type times struct {
		order               string
		occurred, published time.Time
	}
	byEvent := map[string]times{}
	var eventIDs []string
	var id string
	var t times
	var pub *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &t.order, &t.occurred, &pub}, func() error {
		if pub == nil {
			return fmt.Errorf("event %s of order %s is not marked published", id, t.order)
		}
		t.published = *pub
		byEvent[id] = t
		eventIDs = append(eventIDs, id)
		return nil
	}); err != nil {
		return nil, nil, nil, err
	}
	rows, err = consumer.Query(ctx, `SELECT message_key, processed_at FROM processed_event WHERE message_key = ANY($1)`, eventIDs)
	if err != nil {
		return nil, nil, nil, err
	}
	var key string
	var processed time.Time
	_, err = pgx.ForEachRow(rows, []any{&key, &processed}, func() error {
		if t, ok := byEvent[key]; ok {
			pickup = append(pickup, t.published.Sub(t.occurred))
			deliver = append(deliver, processed.Sub(t.published))
			done = append(done, end.at(t.order).Sub(processed))
		}
		return nil
	})
	return pickup, deliver, done, err
}

// histogramQuantiles reads the histogram name from a Prometheus text
// exposition at url and returns the upper bounds, in ms, of the buckets that
// hold its q-quantiles (an upper estimate, as coarse as the buckets).
func histogramQuantiles(ctx context.Context, url, name string, qs ...float64) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	type bucket struct{ le, count float64 }
	var buckets []bucket
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+`_bucket{`)
		if !ok {
			continue
		}
		i := strings.Index(rest, `le="`)
		if i < 0 {
			continue
		}
		leText, after, _ := strings.Cut(rest[i+4:], `"`)
		le := math.Inf(1)
		if leText != "+Inf" {
			if le, err = strconv.ParseFloat(leText, 64); err != nil {
				return nil, err
			}
		}
		fields := strings.Fields(after)
		c, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return nil, err
		}
		buckets = append(buckets, bucket{le, c})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(buckets) == 0 || buckets[len(buckets)-1].count == 0 {
		return nil, fmt.Errorf("%s: no observations at %s", name, url)
	}
	slices.SortFunc(buckets, func(a, b bucket) int { return int(math.Copysign(1, a.le-b.le)) })
	total := buckets[len(buckets)-1].count
	out := make([]float64, len(qs))
	for n, q := range qs {
		for _, b := range buckets {
			if b.count >= q*total {
				out[n] = b.le * 1000
				break
			}
		}
	}
	return out, nil
}
