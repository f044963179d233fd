package dlq

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/amqp"
)

// scrapeTimeout bounds each database or broker call of one scrape.
const scrapeTimeout = 2 * time.Second

// Collector exports, on every scrape:
//
//	dead_letters_open{consumer}   message keys with a dead_letter row of the consumer not yet
//	                              replayed or dropped
//	amqp_queue_messages{queue}    messages ready in each watched queue (the dead-letter
//	                              queue, the unroutable queue), read with a passive declare
//
// A call that fails or takes longer than 2 s leaves its series out of that scrape
// and is logged at debug level, so a missing series means "unknown", never zero.
type Collector struct {
	pool     *pgxpool.Pool
	conn     *amqp.Connection
	consumer string
	queues   []string
	logger   *slog.Logger
	open     *prometheus.Desc
	depth    *prometheus.Desc
}

// NewCollector returns a Collector of consumer's rows in pool's dead_letter table and
// of queues on conn. Register it on the service's registry.
func NewCollector(pool *pgxpool.Pool, conn *amqp.Connection, consumer string, queues []string, logger *slog.Logger) *Collector {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Collector{
		pool: pool, conn: conn, consumer: consumer, queues: queues, logger: logger,
		open: prometheus.NewDesc("dead_letters_open", "Dead letters recorded and not yet replayed or dropped.",
			nil, prometheus.Labels{"consumer": consumer}),
		depth: prometheus.NewDesc("amqp_queue_messages", "Messages ready in the queue.", []string{"queue"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.open
	ch <- c.depth
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	var n int64
	err := c.pool.QueryRow(ctx, `SELECT count(DISTINCT message_key) FROM dead_letter WHERE consumer = $1 AND resolved_at IS NULL`, c.consumer).Scan(&n)
	if err != nil {
		c.logger.Debug("dead_letters_open not collected", slog.Any("error", err))
	} else {
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(n))
	}
	for _, q := range c.queues {
		depth, err := c.queueDepth(ctx, q)
		if err != nil {
			c.logger.Debug("amqp_queue_messages not collected", slog.String("queue", q), slog.Any("error", err))
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(depth), q)
	}
}

// queueDepth declares q passively on a channel of its own, which it closes when ctx
// ends first (that also ends the declare).
func (c *Collector) queueDepth(ctx context.Context, q string) (int, error) {
	ch, err := c.conn.Channel(ctx)
	if err != nil {
		return 0, err
	}
	stop := context.AfterFunc(ctx, func() { _ = ch.Close() })
	defer func() {
		stop()
		_ = ch.Close()
	}()
	info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return info.Messages, nil
}
