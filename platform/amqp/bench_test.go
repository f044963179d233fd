package amqp

import (
	"strconv"
	"testing"
	"time"
)

// The benchmarks publish into the quorum queue of a private topology; one
// op is one message. Compare msgs/s of the two modes (docs/architecture.md, rule 2).

func BenchmarkPublishBatch(b *testing.B) {
	for _, size := range []int{100, 500} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			topo := testTopology(b)
			pub := NewPublisher(dialTest(b, topo), topo.Exchange)
			defer pub.Close()
			msgs := messages(size, "bench")
			b.ResetTimer()
			start := time.Now()
			for sent := 0; sent < b.N; sent += size {
				batch := msgs[:min(size, b.N-sent)]
				if n, err := pub.PublishBatch(b.Context(), batch, 30*time.Second); err != nil {
					b.Fatalf("confirmed %d: %v", n, err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}

// BenchmarkPublishOne publishes one message per call and waits for its
// confirm: the baseline that PublishBatch pipelines away.
func BenchmarkPublishOne(b *testing.B) {
	topo := testTopology(b)
	pub := NewPublisher(dialTest(b, topo), topo.Exchange)
	defer pub.Close()
	msg := messages(1, "bench")[0]
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, err := pub.PublishBatch(b.Context(), []Message{msg}, 30*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
