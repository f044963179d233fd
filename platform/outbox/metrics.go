package outbox

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// relayMetrics are the relay's Prometheus collectors.
type relayMetrics struct {
	published      prometheus.Counter
	failures       prometheus.Counter
	batchSize      prometheus.Histogram
	unpublished    prometheus.Gauge
	oldestAge      prometheus.Gauge
	confirmLatency prometheus.Histogram
	leader         prometheus.Gauge

	partitions      prometheus.Gauge
	partLeader      *prometheus.GaugeVec
	partUnpublished *prometheus.GaugeVec
	partOldestAge   *prometheus.GaugeVec
	partFailures    *prometheus.CounterVec
}

// newRelayMetrics registers on reg, for a relay with n partitions:
//   - relay_published_total: rows published and marked (counter);
//   - relay_publish_failures_total: batches stopped by a nack, a return, a
//     confirm timeout or a channel error (counter);
//   - relay_batch_size: rows per non-empty batch (histogram);
//   - relay_unpublished_rows: rows waiting to be published (gauge);
//   - relay_oldest_unpublished_age_seconds: age of the oldest waiting row,
//     0 when none waits; the signal to alert on (gauge);
//   - relay_confirm_latency_seconds: from publishing a batch to its last
//     confirm (histogram);
//   - relay_leader: 1 while this relay leads at least one partition, else 0;
//   - relay_partitions: the partition count this relay is configured with;
//   - relay_partition_leader{partition="N"}: 1 while this relay leads
//     partition N, else 0 (every partition is shown);
//   - relay_partition_unpublished_rows{partition} and
//     relay_partition_oldest_unpublished_age_seconds{partition}: the backlog
//     gauges per partition;
//   - relay_partition_publish_failures_total{partition}: failed batches per
//     partition (counter).
func newRelayMetrics(reg prometheus.Registerer, n int) (*relayMetrics, error) {
	m := &relayMetrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_published_total",
			Help: "Outbox rows published with a broker confirm and marked published.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_publish_failures_total",
			Help: "Batches stopped by a nack, a return, a confirm timeout or a channel error.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relay_batch_size",
			Help:    "Rows per non-empty relay batch.",
			Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000},
		}),
		unpublished: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relay_unpublished_rows",
			Help: "Outbox rows not yet published.",
		}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relay_oldest_unpublished_age_seconds",
			Help: "Age in seconds of the oldest unpublished outbox row (0 when none).",
		}),
		confirmLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relay_confirm_latency_seconds",
			Help:    "Seconds from publishing a batch to the broker's last confirm.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relay_leader",
			Help: "1 while this relay leads at least one outbox partition, 0 while it stands by.",
		}),
		partitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relay_partitions",
			Help: "The number of outbox partitions this relay is configured with (RELAY_PARTITIONS).",
		}),
		partLeader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_partition_leader",
			Help: "1 while this relay leads the outbox partition, else 0.",
		}, []string{"partition"}),
		partUnpublished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_partition_unpublished_rows",
			Help: "Outbox rows of the partition not yet published.",
		}, []string{"partition"}),
		partOldestAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_partition_oldest_unpublished_age_seconds",
			Help: "Age in seconds of the partition's oldest unpublished outbox row (0 when none).",
		}, []string{"partition"}),
		partFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_partition_publish_failures_total",
			Help: "Batches of the partition stopped by a nack, a return, a confirm timeout or a channel error.",
		}, []string{"partition"}),
	}
	for _, c := range []prometheus.Collector{m.published, m.failures, m.batchSize, m.unpublished, m.oldestAge,
		m.confirmLatency, m.leader, m.partitions, m.partLeader, m.partUnpublished, m.partOldestAge, m.partFailures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register relay metrics: %w", err)
		}
	}
	m.partitions.Set(float64(n))
	for p := range n {
		l := strconv.Itoa(p)
		m.partLeader.WithLabelValues(l).Set(0)
		m.partUnpublished.WithLabelValues(l).Set(0)
		m.partOldestAge.WithLabelValues(l).Set(0)
		m.partFailures.WithLabelValues(l).Add(0)
	}
	return m, nil
}
