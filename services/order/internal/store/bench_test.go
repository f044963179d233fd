package store_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
	"example.com/shop/services/order/internal/order"
	"example.com/shop/services/order/internal/store"
	"example.com/shop/services/order/migrations"
	"example.com/shop/testkit"
)

// BenchmarkPlace measures place (lock, transition, save, outbox row, commit) with
// 1 and 8 concurrent clients, each on its own orders. The drafts are created before
// the timer starts. It reports orders/s and the median time of one place (p50-µs),
// which a loaded machine's stalls move less than the mean.
func BenchmarkPlace(b *testing.B) {
	for _, clients := range []int{1, 8} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchPlace(b, clients) })
	}
}

func benchPlace(b *testing.B, clients int) {
	ctx := context.Background()
	_, dbURL := testkit.NewDatabase(b, migrations.Schema)
	u, err := url.Parse(dbURL)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "16") // one connection per client at least
	u.RawQuery = q.Encode()
	pool, err := pg.NewPool(ctx, u.String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	s := store.New(pool, outbox.NewWriter(validator(b), contracts.ProducerOrder))

	ids := make([]uuid.UUID, b.N)
	for i := range ids {
		o := draft(b)
		if err := s.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
		ids[i] = o.ID()
	}

	took := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	b.ResetTimer()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(ids)) {
					return
				}
				start := time.Now()
				if err := s.Update(ctx, ids[i], func(o *order.Order) error { return place(o) }); err != nil {
					errs <- err
					return
				}
				took[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
}
