package events_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
	"example.com/shop/services/stock/internal/events"
	"example.com/shop/services/stock/migrations"
	"example.com/shop/testkit"
)

// BenchmarkInboxOnly is the database half of BenchmarkConsumer: Process called by
// `workers` goroutines, no broker.
func BenchmarkInboxOnly(b *testing.B) {
	for _, c := range []struct{ workers, batch, tx int }{{8, 1, 1}, {32, 1, 1}, {32, 16, 2}, {64, 32, 2}} {
		workers := c.workers
		b.Run(fmt.Sprintf("workers=%d/group=%dx%d", c.workers, c.batch, c.tx), func(b *testing.B) {
			s := &system{t: b, ctx: testkit.Context(b)}
			_, url := testkit.NewDatabase(b, migrations.Schema)
			pool, err := pg.NewPool(s.ctx, fmt.Sprintf("%s%spool_max_conns=%d", url, sep(url), min(workers, 16)+4))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			v, _ := contracts.NewValidator()
			ib := inbox.New(pool, events.Consumer, v, nil, nil, inbox.WithGroupCommit(c.batch, c.tx))
			events.Register(ib, outbox.NewWriter(v, contracts.ProducerStock), nil)
			envs := make([]contracts.Envelope, b.N)
			for n := range envs {
				envs[n], _ = s.placed(2)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range workers {
				wg.Go(func() {
					for {
						n := next.Add(1) - 1
						if n >= int64(b.N) {
							return
						}
						if _, err := ib.Process(s.ctx, envs[n]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}

// BenchmarkBrokerOnly is the broker half of BenchmarkConsumer: the same runtime with a
// handler that does nothing.
func BenchmarkBrokerOnly(b *testing.B) {
	s := newSystem(b)
	s.logger = logging.New(io.Discard, slog.LevelInfo, "stock")
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
	s.startConsumer(consumerOptions{reg: reg, workers: 8, prefetch: 32, wrap: func(amqp.HandlerFunc) amqp.HandlerFunc {
		return func(context.Context, amqp.Delivery) error { return nil }
	}})
	for metric(b, reg, "amqp_consumer_processed_total") < float64(b.N) {
		time.Sleep(5 * time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}
