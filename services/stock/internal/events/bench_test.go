package events_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/pg"
	"example.com/shop/services/stock/migrations"
	"example.com/shop/testkit"
)

// BenchmarkConsumer measures one stock consumer (real broker, inbox dedup, two
// reservations per event) draining b.N placed events that were published before the
// timer starts. Run it with a fixed count, e.g. -benchtime=20000x; it reports events/s.
// Sub-benchmarks vary the workers and the inbox group commit (events per transaction x
// transactions at once); group=1x1 is one transaction per event.
func BenchmarkConsumer(b *testing.B) {
	for _, c := range []struct{ workers, batch, tx int }{
		{8, 1, 1}, {32, 1, 1}, {serviceWorkers, serviceGroup, serviceTx}, {32, 16, 4}, {64, 32, 2},
	} {
		b.Run(fmt.Sprintf("workers=%d/group=%dx%d", c.workers, c.batch, c.tx), func(b *testing.B) {
			benchmarkConsumer(b, c.workers, 4*c.workers, inbox.WithGroupCommit(c.batch, c.tx))
		})
	}
}

func benchmarkConsumer(b *testing.B, workers, prefetch int, opts ...inbox.Option) {
	s := newSystem(b)
	s.logger = logging.New(io.Discard, slog.LevelInfo, "stock")
	// The service's own pool sizing: one connection per worker and some spare.
	_, url := testkit.NewDatabase(b, migrations.Schema)
	pool, err := pg.NewPool(s.ctx, fmt.Sprintf("%s%spool_max_conns=%d", url, sep(url), min(workers, 16)+4))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	s.pool = pool

	const chunk = 1000
	for start := 0; start < b.N; start += chunk {
		msgs := make([]amqp.Message, 0, chunk)
		for range min(chunk, b.N-start) {
			env, _ := s.placed(2)
			msgs = append(msgs, message(b, env))
		}
		s.publish(msgs...)
	}
	conn := s.dial("inspector")
	s.eventually("every event is queued", func() bool { return s.queueDepth(conn, contracts.QueueStock) == b.N })

	reg := prometheus.NewRegistry()
	b.ResetTimer()
	start := time.Now()
	s.startConsumer(consumerOptions{reg: reg, workers: workers, prefetch: prefetch, inbox: opts})
	for metric(b, reg, "amqp_consumer_processed_total") < float64(b.N) {
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	if got := s.keys(); got != b.N {
		b.Fatalf("processed_event rows = %d, want %d", got, b.N)
	}
}

func sep(url string) string {
	for _, c := range url {
		if c == '?' {
			return "&"
		}
	}
	return "?"
}
