package outbox

import (
	"fmt"

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
}

// newRelayMetrics registers on reg:
//   - relay_published_total: rows published and marked (counter);
//   - relay_publish_failures_total: batches stopped by a nack, a return, a
//     confirm timeout or a channel error (counter);
//   - relay_batch_size: rows per non-empty batch (histogram);
//   - relay_unpublished_rows: rows waiting to be published (gauge);
//   - relay_oldest_unpublished_age_seconds: age of the oldest waiting row,
//     0 when none waits; the signal to alert on (gauge);
//   - relay_confirm_latency_seconds: from publishing to the last confirm, per
//     batch in Pipelined mode and per message in OneAtATime mode (histogram);
//   - relay_leader: 1 while this relay holds the lock and publishes, else 0.
func newRelayMetrics(reg prometheus.Registerer) (*relayMetrics, error) {
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
			Help:    "Seconds from publishing to the broker's last confirm (per batch when pipelined, per message when one at a time).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relay_leader",
			Help: "1 while this relay holds the advisory lock and publishes, 0 while it stands by.",
		}),
	}
	for _, c := range []prometheus.Collector{m.published, m.failures, m.batchSize, m.unpublished, m.oldestAge, m.confirmLatency, m.leader} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register relay metrics: %w", err)
		}
	}
	return m, nil
}
