package amqp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// ErrPermanent marks a handler error that no retry can fix (for example a
// message that cannot be decoded). Wrap it, fmt.Errorf("decode: %w",
// amqp.ErrPermanent), and the delivery goes to the dead-letter queue at once
// instead of being retried (DESIGN.md rule 3).
var ErrPermanent = errors.New("permanent failure")

// Delivery is one message handed to a HandlerFunc.
type Delivery struct {
	Body          []byte
	MessageID     string // the event_id
	Type          string // the event name
	RoutingKey    string
	CorrelationID string // the AMQP correlation_id property, if set
	Timestamp     time.Time
	// Headers are the message's headers; read-only, because a retried copy
	// is made from them after the handler returns.
	Headers amqp091.Table
	// Attempt is 1 on the first delivery and grows by one on every retry
	// (read from ConsumerConfig.AttemptHeader; broker redeliveries after a
	// lost connection do not count).
	Attempt int
	// Redelivered is the broker's flag: the message may have been seen before.
	Redelivered bool
}

// HandlerFunc processes one delivery. nil acknowledges it; an error that
// wraps ErrPermanent dead-letters it; any other error retries it. ctx is not
// cancelled when the consumer shuts down, only when the shutdown grace
// period (ConsumerConfig.ShutdownTimeout) is over.
type HandlerFunc func(ctx context.Context, d Delivery) error

// ConsumerConfig configures a Consumer. Zero fields take their defaults.
type ConsumerConfig struct {
	// Queue to consume from (required); it must exist (Topology.Declare).
	Queue string
	// Name labels metrics and logs and prefixes consumer tags (default Queue).
	Name string
	// Workers is the number of deliveries handled at once (default 8).
	Workers int
	// Prefetch is the channel's basic.qos prefetch count: deliveries the
	// broker sends ahead before acks (default 2*Workers).
	Prefetch int
	// MaxAttempts is how often a delivery is handled before a failure
	// dead-letters it (default 5; 1 disables retries).
	MaxAttempts int
	// RetryDelays must be the QueueSpec.RetryDelays of Queue: their count is
	// the number of retry levels (default DefaultRetryDelays()).
	RetryDelays []time.Duration
	// AttemptHeader is the header that carries the attempt number on retried
	// copies (default "x-attempt").
	AttemptHeader string
	// RetryConfirmTimeout bounds moving a failed delivery to its retry queue
	// (default 5 s).
	RetryConfirmTimeout time.Duration
	// ShutdownTimeout is how long in-flight handlers may still run after
	// Run's ctx ends before their ctx is cancelled (default 30 s).
	ShutdownTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before subscribing again
	// after a lost channel (defaults 100 ms and 10 s).
	MinBackoff, MaxBackoff time.Duration
	// DeadLetterQueue, when set, is where failed deliveries are dead-lettered
	// as copies carrying why (see deadLetter); empty rejects them to the
	// queue's dead-letter exchange instead, without those headers.
	DeadLetterQueue string
	// OnDeadLetter, when set, is called before a dead-lettered copy is
	// published (to record it); an error keeps the delivery in its queue.
	OnDeadLetter func(ctx context.Context, dl DeadLetter) error
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	if c.Name == "" {
		c.Name = c.Queue
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 2 * c.Workers
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.RetryDelays == nil {
		c.RetryDelays = DefaultRetryDelays()
	}
	if c.AttemptHeader == "" {
		c.AttemptHeader = "x-attempt"
	}
	if c.RetryConfirmTimeout <= 0 {
		c.RetryConfirmTimeout = 5 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	o := Options{MinBackoff: c.MinBackoff, MaxBackoff: c.MaxBackoff}.withDefaults()
	c.MinBackoff, c.MaxBackoff = o.MinBackoff, o.MaxBackoff
	return c
}

// Consumer runs a handler over the deliveries of one queue with manual
// acknowledgements. Each delivery is settled exactly once, on the channel
// it came from, after its handler returned:
//
//   - nil: ack.
//   - an error wrapping ErrPermanent: dead-lettered at once. With
//     DeadLetterQueue set, OnDeadLetter records it, a copy (body and
//     properties intact, headers x-last-error, x-attempt and
//     x-dead-lettered-at added) is published to DeadLetterQueue with a
//     confirm, and only then the original is acked; if recording or
//     publishing fails the original is requeued after the first retry
//     delay, so nothing is lost. Without DeadLetterQueue it is rejected
//     without requeue and the queue's dead-letter exchange moves it, body
//     and headers intact, to its dead-letter queue (the broker adds x-death).
//   - another error, attempt < MaxAttempts: a copy (same body, properties
//     and headers, AttemptHeader = attempt+1, persistent) is published to the
//     retry queue of level min(attempt, levels) through the default exchange
//     on a confirm-mode channel; after the confirm the original is acked. If
//     that publish fails the original is requeued (nack), so nothing is lost.
//     The retry queue's TTL sends the copy back to the queue.
//   - another error at attempt >= MaxAttempts: dead-lettered, as for
//     ErrPermanent. The error is also logged with the message id.
//
// Delivery is at least once (DESIGN.md rule 3): a delivery whose ack is lost
// with its channel comes again, so handlers must be idempotent (the inbox).
type Consumer struct {
	conn    *Connection
	cfg     ConsumerConfig
	handle  HandlerFunc
	logger  *slog.Logger
	metrics consumerMetrics
	retry   *Publisher
	running atomic.Bool
}

// NewConsumer returns a Consumer of cfg.Queue on conn. It registers the
// consumer's metrics on reg (labels consumer and queue; collectors already
// registered by another Consumer are shared) and fails when cfg is invalid
// or registration fails. A nil reg registers nothing.
func NewConsumer(conn *Connection, cfg ConsumerConfig, h HandlerFunc, logger *slog.Logger, reg prometheus.Registerer) (*Consumer, error) {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Queue == "":
		return nil, errors.New("amqp consumer: Queue is required")
	case h == nil:
		return nil, errors.New("amqp consumer: handler is nil")
	case cfg.MaxAttempts > 1 && len(cfg.RetryDelays) == 0:
		return nil, fmt.Errorf("amqp consumer %s: MaxAttempts %d needs at least one retry level", cfg.Name, cfg.MaxAttempts)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newConsumerMetrics(reg, cfg.Name, cfg.Queue)
	if err != nil {
		return nil, fmt.Errorf("amqp consumer %s: %w", cfg.Name, err)
	}
	return &Consumer{
		conn:    conn,
		cfg:     cfg,
		handle:  h,
		logger:  logger.With(slog.String("consumer", cfg.Name), slog.String("queue", cfg.Queue)),
		metrics: m,
		retry:   NewPublisher(conn, ""),
	}, nil
}

// Run consumes until ctx ends, then shuts down gracefully and returns nil:
// it cancels the subscription, lets in-flight handlers finish and settles
// them (bounded by ShutdownTimeout), and closes its channels; unstarted
// prefetched deliveries go back to the queue. After a lost channel or
// connection, or a cancel from the broker (queue deleted), it subscribes
// again with backoff. It returns an error only when the Connection is closed
// or Run is already running.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("amqp consumer %s: already running", c.cfg.Name)
	}
	defer c.running.Store(false)
	defer func() { _ = c.retry.Close() }()

	hctx, release := withGrace(ctx, c.cfg.ShutdownTimeout)
	defer release()

	b := newBackoff(c.cfg.MinBackoff, c.cfg.MaxBackoff)
	for {
		subscribed, err := c.session(ctx, hctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrClosed) {
			return fmt.Errorf("amqp consumer %s: %w", c.cfg.Name, err)
		}
		if subscribed {
			b = newBackoff(c.cfg.MinBackoff, c.cfg.MaxBackoff)
		}
		c.logger.WarnContext(ctx, "amqp consumer interrupted, subscribing again", slog.Any("error", err))
		if sleep(ctx, nil, b.next()) != nil {
			return nil
		}
	}
}

// session subscribes once on a new channel and runs the workers until ctx
// ends or the subscription is lost. subscribed reports whether it got as
// far as consuming.
func (c *Consumer) session(ctx, hctx context.Context) (subscribed bool, err error) {
	ch, err := c.conn.Channel(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = ch.Close() }()

	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("qos: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	cancelled := ch.NotifyCancel(make(chan string, 1))
	tag := c.cfg.Name + "-" + rand.Text()[:12]
	deliveries, err := ch.Consume(c.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consume %s: %w", c.cfg.Queue, err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() { c.work(hctx, stop, deliveries) })
	}

	select {
	case <-ctx.Done():
		// Stop the flow first so the broker sends nothing new, then let
		// the in-flight handlers finish and ack on the still-open channel.
		if err := ch.Cancel(tag, false); err != nil {
			c.logger.Warn("amqp consumer cancel failed", slog.Any("error", err))
		}
	case e := <-closed:
		err = errors.New("channel closed")
		if e != nil {
			err = fmt.Errorf("channel closed: %w", e)
		}
	case <-cancelled:
		err = fmt.Errorf("subscription %s cancelled by the broker", tag)
	}
	close(stop)
	wg.Wait()
	return true, err
}

// work handles deliveries until stop is closed or the subscription ends.
// It takes no new delivery once stop is closed.
func (c *Consumer) work(ctx context.Context, stop <-chan struct{}, deliveries <-chan amqp091.Delivery) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		select {
		case <-stop:
			return
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			c.process(ctx, &d)
		}
	}
}

func (c *Consumer) process(ctx context.Context, d *amqp091.Delivery) {
	attempt := attemptOf(d.Headers[c.cfg.AttemptHeader])
	log := c.logger.With(slog.String("message_id", d.MessageId), slog.String("type", d.Type), slog.Int("attempt", attempt))

	c.metrics.inFlight.Inc()
	start := time.Now()
	err := c.call(ctx, Delivery{
		Body: d.Body, MessageID: d.MessageId, Type: d.Type, RoutingKey: d.RoutingKey,
		CorrelationID: d.CorrelationId, Timestamp: d.Timestamp, Headers: d.Headers,
		Attempt: attempt, Redelivered: d.Redelivered,
	})
	c.metrics.duration.Observe(time.Since(start).Seconds())
	c.metrics.inFlight.Dec()

	switch {
	case err == nil:
		c.metrics.processed.Inc()
		settle(log, "ack", d.Ack(false))
	case errors.Is(err, ErrPermanent):
		c.metrics.failures.Inc()
		c.deadLetter(ctx, log.With(slog.String("why", "permanent failure")), d, attempt, err)
	case attempt >= c.cfg.MaxAttempts || len(c.cfg.RetryDelays) == 0:
		c.metrics.failures.Inc()
		c.deadLetter(ctx, log.With(slog.String("why", "attempts exhausted"), slog.Int("max_attempts", c.cfg.MaxAttempts)), d, attempt, err)
	default:
		c.metrics.failures.Inc()
		level := min(attempt, len(c.cfg.RetryDelays))
		queue := RetryQueueName(c.cfg.Queue, c.cfg.RetryDelays[level-1])
		delay := c.cfg.RetryDelays[level-1]
		if perr := c.publishRetry(ctx, queue, d, attempt); perr != nil {
			// Nothing may be lost, so the delivery goes back to its queue; held
			// for the retry delay first, so that a broken retry path (a deleted
			// queue, a broker refusing publishes) slows redelivery to one per
			// delay instead of a tight loop.
			log.Error("retry publish failed, requeueing after the retry delay", slog.Any("error", err),
				slog.Any("publish_error", perr), slog.Duration("delay", delay))
			_ = sleep(ctx, nil, delay)
			settle(log, "nack", d.Nack(false, true))
			return
		}
		log.Warn("handler failed, retrying later", slog.Any("error", err), slog.String("retry_queue", queue))
		c.metrics.retries.Inc()
		settle(log, "ack", d.Ack(false))
	}
}

// call runs the handler, turning a panic into an ordinary (retried) error.
// publishRetry publishes the copy of d for its next attempt to the retry queue
// and waits for the broker's confirm. When the broker returns it (the retry
// queue is missing), it declares the topology again and tries once more.
func (c *Consumer) publishRetry(ctx context.Context, queue string, d *amqp091.Delivery, attempt int) error {
	return c.publishCopy(ctx, queue, retryCopy(d, c.cfg.AttemptHeader, attempt+1))
}

// publishCopy publishes msg to queue through the default exchange and waits
// for the broker's confirm, declaring the topology again once when the
// broker returns it (the queue is missing).
func (c *Consumer) publishCopy(ctx context.Context, queue string, msg amqp091.Publishing) error {
	err := c.retry.publishRaw(ctx, queue, msg, c.cfg.RetryConfirmTimeout)
	if !errors.Is(err, ErrReturned) {
		return err
	}
	if derr := c.conn.Redeclare(ctx); derr != nil {
		return errors.Join(err, derr)
	}
	return c.retry.publishRaw(ctx, queue, msg, c.cfg.RetryConfirmTimeout)
}

func (c *Consumer) call(ctx context.Context, d Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.logger.Error("handler panic", slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return c.handle(ctx, d)
}

// settle logs a failed ack/nack/reject: the channel is gone, so the broker
// will deliver the message again.
func settle(log *slog.Logger, op string, err error) {
	if err != nil {
		log.Warn("amqp "+op+" failed; the message will be redelivered", slog.Any("error", err))
	}
}

// retryCopy is d as a new persistent message with header = attempt.
func retryCopy(d *amqp091.Delivery, header string, attempt int) amqp091.Publishing {
	headers := make(amqp091.Table, len(d.Headers)+1)
	for k, v := range d.Headers {
		headers[k] = v
	}
	headers[header] = int32(attempt)
	return amqp091.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp091.Persistent,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		UserId:          d.UserId,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

// attemptOf reads the attempt header; missing or invalid means 1.
func attemptOf(v any) int {
	var n int64
	switch x := v.(type) {
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case int:
		n = int64(x)
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	case string:
		n, _ = strconv.ParseInt(x, 10, 32)
	}
	if n < 1 || n > 1<<30 {
		return 1
	}
	return int(n)
}

// withGrace returns a context with ctx's values that is cancelled grace
// after ctx ends (or by release), so handlers are not cut off mid-work
// when a shutdown begins.
func withGrace(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var timer *time.Timer
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(grace, cancel)
	})
	return gctx, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

type consumerMetrics struct {
	processed, failures, retries, deadLettered prometheus.Counter
	duration                                   prometheus.Observer
	inFlight                                   prometheus.Gauge
}

func newConsumerMetrics(reg prometheus.Registerer, name, queue string) (consumerMetrics, error) {
	labels := []string{"consumer", "queue"}
	counter := func(metric, help string) (*prometheus.CounterVec, error) {
		return register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "amqp", Subsystem: "consumer", Name: metric, Help: help,
		}, labels))
	}
	processed, err1 := counter("processed_total", "Deliveries handled successfully and acked.")
	failures, err2 := counter("failures_total", "Deliveries whose handler returned an error.")
	retries, err3 := counter("retries_total", "Failed deliveries moved to a retry queue.")
	dead, err4 := counter("dead_lettered_total", "Deliveries rejected to the dead-letter queue.")
	duration, err5 := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "amqp", Subsystem: "consumer", Name: "handler_duration_seconds",
		Help: "Time spent in the handler, in seconds.", Buckets: prometheus.DefBuckets,
	}, labels))
	inFlight, err6 := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "amqp", Subsystem: "consumer", Name: "in_flight",
		Help: "Deliveries being handled right now.",
	}, labels))
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return consumerMetrics{}, err
	}
	return consumerMetrics{
		processed:    processed.WithLabelValues(name, queue),
		failures:     failures.WithLabelValues(name, queue),
		retries:      retries.WithLabelValues(name, queue),
		deadLettered: dead.WithLabelValues(name, queue),
		duration:     duration.WithLabelValues(name, queue),
		inFlight:     inFlight.WithLabelValues(name, queue),
	}, nil
}

// register registers c, or returns the equal collector registered before.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			if existing, ok := already.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("register metric: %w", err)
	}
	return c, nil
}
