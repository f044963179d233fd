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
	out := map[string][]time.Duration{"api": slices.Sorted(slices.Values(answered))}
	oconn, err := pgx.Connect(ctx, orderURL)
	if err != nil {
		return nil, err
	}
	defer oconn.Close(context.WithoutCancel(ctx))
	rows, err := oconn.Query(ctx, `SELECT id::text, envelope->'payload'->>'order_id', occurred_at, published_at
		FROM outbox WHERE event_name = $1 AND envelope->'payload'->>'order_id' = ANY($2)`, contracts.EventOrderPlaced, ids)
	if err != nil {
		return nil, err
	}
	type times struct {
		order               string
		occurred, published time.Time
	}
	byEvent := map[string]*times{}
	var eventIDs []string
	for rows.Next() {
		var t times
		var id string
		var pub *time.Time
		if err := rows.Scan(&id, &t.order, &t.occurred, &pub); err != nil {
			rows.Close()
			return nil, err
		}
		if pub == nil {
			rows.Close()
			return nil, fmt.Errorf("event %s of order %s has a reservation but is not marked published", id, t.order)
		}
		t.published = *pub
		byEvent[id] = &t
		eventIDs = append(eventIDs, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sconn, err := pgx.Connect(ctx, stockURL)
	if err != nil {
		return nil, err
	}
	defer sconn.Close(context.WithoutCancel(ctx))
	rows, err = sconn.Query(ctx, `SELECT message_key, processed_at FROM processed_event WHERE message_key = ANY($1)`, eventIDs)
	if err != nil {
		return nil, err
	}
	var key string
	var processed time.Time
	_, err = pgx.ForEachRow(rows, []any{&key, &processed}, func() error {
		t := byEvent[key]
		if t == nil {
			return nil
		}
		out["pickup"] = append(out["pickup"], t.published.Sub(t.occurred))
		out["deliver"] = append(out["deliver"], processed.Sub(t.published))
		out["consume"] = append(out["consume"], w.at(t.order).Sub(processed))
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := answerStages(ctx, oconn, sconn, ids, wc, out); err != nil {
		return nil, err
	}
	for _, k := range []string{"pickup", "deliver", "consume", "answer_pickup", "answer_deliver", "apply"} {
		if len(out[k]) != len(ids) {
			return nil, fmt.Errorf("stage %s: %d of %d orders found", k, len(out[k]), len(ids))
		}
		slices.Sort(out[k])
	}
	return out, nil
}

// answerStages adds to out the answer leg's per-order stages of the orders in
// ids: stock's answers from its outbox (sconn), order's keys of them from its
// processed_event (oconn).
func answerStages(ctx context.Context, oconn, sconn *pgx.Conn, ids []string, wc *watcher, out map[string][]time.Duration) error {
	rows, err := sconn.Query(ctx, `SELECT id::text, envelope->'payload'->>'order_id', occurred_at, published_at FROM outbox
		WHERE event_name = ANY($1) AND envelope->'payload'->>'order_id' = ANY($2)`,
		[]string{contracts.EventStockReservationConfirmed, contracts.EventStockReservationRejected}, ids)
	if err != nil {
		return err
	}
	type answer struct {
		order               string
		occurred, published time.Time
	}
	byEvent := map[string]answer{}
	var eventIDs []string
	var id string
	var a answer
	var pub *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &a.order, &a.occurred, &pub}, func() error {
		if pub == nil {
			return fmt.Errorf("stock's answer %s to order %s is not marked published", id, a.order)
		}
		a.published = *pub
		byEvent[id] = a
		eventIDs = append(eventIDs, id)
		return nil
	}); err != nil {
		return err
	}
	rows, err = oconn.Query(ctx, `SELECT message_key, processed_at FROM processed_event WHERE message_key = ANY($1)`, eventIDs)
	if err != nil {
		return err
	}
	var key string
	var processed time.Time
	_, err = pgx.ForEachRow(rows, []any{&key, &processed}, func() error {
		a, ok := byEvent[key]
		if !ok {
			return nil
		}
		out["answer_pickup"] = append(out["answer_pickup"], a.published.Sub(a.occurred))
		out["answer_deliver"] = append(out["answer_deliver"], processed.Sub(a.published))
		out["apply"] = append(out["apply"], wc.at(a.order).Sub(processed))
		return nil
	})
	return err
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
