// Package probe reads what the live page counts beyond the databases: the consumers'
// Prometheus counters (duplicates skipped, retries, dead letters) over HTTP, and the
// number of messages in queues through a passive queue.declare, which creates,
// removes and reorders nothing and needs no management plugin.
package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/amqp"
)

// Timeout bounds one scrape and one queue read (2 s).
const Timeout = 2 * time.Second

// Probe reads the consumers' metrics and the queue depths. It is safe for concurrent use.
type Probe struct {
	metricsURLs map[string]string // consumer -> URL of its /metrics
	client      *http.Client
	nodes       *amqp.Nodes // nil when the URL is refused
	nodesErr    error
	logger      *slog.Logger

	mu   sync.Mutex
	conn *amqp091.Connection // dialled on first use, again after a loss
}

// New returns a Probe scraping metricsURLs (consumer name -> http://host:port/metrics)
// and reading queue depths on the broker of amqpURL: one URL or the comma-separated
// URLs of a cluster's nodes (amqp.Nodes), each dial trying them in turn from the node
// after the one tried last. A URL that amqp.ParseNodes refuses makes every queue
// read fail with its error. logger (nil: none) gets "amqp connected" with the node
// on each dial. Close releases its connection.
func New(metricsURLs map[string]string, amqpURL string, logger *slog.Logger) *Probe {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	nodes, err := amqp.ParseNodes(amqpURL)
	return &Probe{metricsURLs: metricsURLs, client: &http.Client{Timeout: Timeout},
		nodes: nodes, nodesErr: err, logger: logger.With(slog.String("component", "probe"))}
}

// Close closes the broker connection, if one is open.
func (p *Probe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil
	}
	err := p.conn.Close()
	p.conn = nil
	return err
}

// channel opens a channel, dialling the broker (within Timeout per node, all
// within ctx) when no connection is open.
func (p *Probe) channel(ctx context.Context) (*amqp091.Channel, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil || p.conn.IsClosed() {
		if p.nodesErr != nil {
			return nil, fmt.Errorf("dial the broker: %w", p.nodesErr)
		}
		conn, node, err := p.nodes.Dial(ctx, Timeout, amqp091.Config{
			Properties: amqp091.Table{"connection_name": "auditor"},
		})
		if err != nil {
			return nil, fmt.Errorf("dial the broker: %w", err)
		}
		p.logger.Info("amqp connected", slog.String("node", node))
		p.conn = conn
	}
	return p.conn.Channel()
}

// Counters sums, per consumer, the samples of each named counter in its /metrics
// (over every label set). A consumer that cannot be scraped is missing from the result
// and named in the error.
func (p *Probe) Counters(ctx context.Context, names ...string) (map[string]map[string]float64, error) {
	out := map[string]map[string]float64{}
	var errs []error
	for consumer, url := range p.metricsURLs {
		fams, err := p.scrape(ctx, url)
		if err != nil {
			errs = append(errs, fmt.Errorf("scrape %s: %w", consumer, err))
			continue
		}
		vals := map[string]float64{}
		for _, n := range names {
			vals[n] = sum(fams[n])
		}
		out[consumer] = vals
	}
	return out, errors.Join(errs...)
}

func (p *Probe) scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

func sum(f *dto.MetricFamily) float64 {
	if f == nil {
		return 0
	}
	var s float64
	for _, m := range f.GetMetric() {
		switch {
		case m.GetCounter() != nil:
			s += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			s += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			s += m.GetUntyped().GetValue()
		}
	}
	return s
}

// QueueDepths returns the ready messages of each named queue that exists, read with a
// passive queue.declare on a channel of its own (a failed declare closes it), each
// bounded by Timeout.
func (p *Probe) QueueDepths(ctx context.Context, queues ...string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	out := make(map[string]int, len(queues))
	var errs []error
	for _, q := range queues {
		ch, err := p.channel(ctx)
		if err != nil {
			return out, err
		}
		done := make(chan struct{})
		var n int
		var derr error
		go func() {
			defer close(done)
			info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			n, derr = info.Messages, err
		}()
		select {
		case <-done:
		case <-ctx.Done():
			_ = ch.Close()
			<-done
			return out, fmt.Errorf("queue %s: %w", q, ctx.Err())
		}
		_ = ch.Close()
		if derr != nil {
			errs = append(errs, fmt.Errorf("queue %s: %w", q, derr))
			continue
		}
		out[q] = n
	}
	return out, errors.Join(errs...)
}
