package outbox

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"example.com/shop/contracts"
)

// benchRows is the size of the outbox backlog each iteration publishes.
const benchRows = 20_000

// BenchmarkRelay drains the same pre-filled outbox (benchRows rows of
// order.order.placed.v1, bound to a quorum queue) once per iteration,
// pipelined (the relay) and one confirm at a time (the baseline, a test
// wrapper of the publisher), and reports events/s. Run it with
// -benchtime=1x or 3x:
//
//	go test -run '^$' -bench BenchmarkRelay -benchtime 2x ./outbox
func BenchmarkRelay(b *testing.B) {
	pool := newOutboxDB(b)
	topo := testTopology(b)
	fillOutbox(b, pool.CopyFrom, benchRows)
	raw := rawChannel(b)

	for _, mode := range []string{"pipelined", "one-at-a-time"} {
		b.Run(mode, func(b *testing.B) {
			var pub Publisher = newPublisher(b, topo)
			if mode == "one-at-a-time" {
				pub = oneAtATime{pub}
			}
			cfg := RelayConfig{PollInterval: 10 * time.Millisecond}
			var confirmSeconds float64
			for range b.N {
				b.StopTimer()
				if _, err := pool.Exec(b.Context(), `UPDATE outbox SET published_at = NULL, attempts = 0`); err != nil {
					b.Fatal(err)
				}
				if _, err := pool.Exec(b.Context(), `VACUUM ANALYZE outbox`); err != nil {
					b.Fatal(err)
				}
				if _, err := raw.QueuePurge(topo.Queues[0].Name, false); err != nil {
					b.Fatal(err)
				}
				r := newTestRelay(b, pool, pub, cfg)
				ctx, cancel := context.WithCancel(b.Context())
				done := make(chan error, 1)
				b.StartTimer()

				go func() { done <- r.Run(ctx) }()
				for testutil.ToFloat64(r.m.published) < benchRows {
					time.Sleep(time.Millisecond)
				}

				b.StopTimer()
				var m dto.Metric
				if err := r.m.confirmLatency.Write(&m); err != nil {
					b.Fatal(err)
				}
				confirmSeconds += m.GetHistogram().GetSampleSum()
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "events/s")
			// The share of the time spent waiting for the broker.
			b.ReportMetric(confirmSeconds/b.Elapsed().Seconds(), "confirm-share")
		})
	}
}

// fillOutbox copies n realistic order.order.placed.v1 rows into the outbox.
func fillOutbox(b *testing.B, copyFrom func(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error), n int) {
	b.Helper()
	rows := make([][]any, n)
	now := time.Now()
	for i := range rows {
		env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, uuid.NewString(), contracts.OrderPlaced{
			OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2,
			Lines: []contracts.OrderLine{
				{ProductID: uuid.New(), Quantity: "2.000"},
				{ProductID: uuid.New(), Quantity: "1.500"},
			},
		}, now.Add(time.Duration(i)*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		body, err := json.Marshal(env)
		if err != nil {
			b.Fatal(err)
		}
		rows[i] = []any{env.EventID, env.EventName, env.EventName, string(body), env.OccurredAt}
	}
	if _, err := copyFrom(b.Context(), pgx.Identifier{"outbox"},
		[]string{"id", "event_name", "routing_key", "envelope", "occurred_at"}, pgx.CopyFromRows(rows)); err != nil {
		b.Fatal(err)
	}
}
