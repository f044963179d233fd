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
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"example.com/shop/platform/backoff"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/metrics"
)

// ErrPermanent marks a handler error that no retry can fix (for example a
// message that cannot be decoded). Wrap it, fmt.Errorf("decode: %w",
// amqp.ErrPermanent), and the delivery goes to the dead-letter queue at once
// instead of being retried (docs/architecture.md, rule 3).
var ErrPermanent = errors.New("permanent failure")

// ErrUnavailable marks a handler error caused by a dependency that is down
// (the database refuses connections, is shutting down, a pool cannot hand out
// a connection), not by the message. Wrap it, fmt.Errorf("%w: %w",
// amqp.ErrUnavailable, err), and the delivery does not count as an attempt:
// the Consumer pauses (see Consumer) and the delivery goes back to its queue
// unchanged. An outage of the infrastructure is not a bad message.
var ErrUnavailable = errors.New("dependency unavailable")

// ErrPaused is wrapped by Consumer.Ready while the consumer is paused.
var ErrPaused = errors.New("consumer paused")

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
	// ContentType is the AMQP content_type property ("" when unset).
	ContentType string
	// Origin is where the message entered the broker (OriginOf): the exchange
	// it was published to and the user_id the broker verified, also for a
	// retried copy.
	Origin Origin
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
	// Run's ctx ends before their ctx is cancelled (default 5 s: handlers
	// take milliseconds, and a process must stop within its grace period
	// even when its database does not answer).
	ShutdownTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before subscribing again
	// after a lost channel, and between checks of Probe while paused
	// (defaults 100 ms and 10 s).
	MinBackoff, MaxBackoff time.Duration
	// Probe checks the handler's dependencies (for example the database
	// pool's Ping) while the consumer is paused; it resumes once Probe
	// returns nil. Nil means no check: the consumer resumes after one
	// backoff delay. Each call gets ProbeTimeout.
	Probe func(ctx context.Context) error
	// ProbeTimeout bounds one call of Probe (default 5 s).
	ProbeTimeout time.Duration
	// IdleResubscribe is how long a subscription may go without a delivery
	// before the consumer subscribes again on a new channel (default 30 s;
	// negative never). It bounds a stall the broker does not report: a
	// quorum queue deleted and declared again under the same name before
	// the subscribing channel learnt of the deletion keeps that channel
	// subscribed, and the broker hands it deliveries it never passes on
	// (seen on RabbitMQ 3.10).
	IdleResubscribe time.Duration
	// RetryConn is the connection the retry copies are published on
	// (default: the consuming connection). Give it a Connection of its own:
	// the broker blocks a connection that publishes during a resource alarm,
	// and with it the acks of every delivery on that connection.
	RetryConn *Connection
	// DeadLetterQueue is where failed deliveries are dead-lettered, as
	// copies carrying why (required; QueueSpec.DeadLetterQueue).
	DeadLetterQueue string
	// OnDeadLetter, when set, is called before a dead-lettered copy is
	// published (to record it); an error keeps the delivery in its queue.
	OnDeadLetter func(ctx context.Context, dl DeadLetter) error
	// TracerProvider starts the process spans (default: the global one that
	// telemetry.Setup installs).
	TracerProvider trace.TracerProvider
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
		c.ShutdownTimeout = 5 * time.Second
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = 5 * time.Second
	}
	if c.IdleResubscribe == 0 {
		c.IdleResubscribe = 30 * time.Second
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	o := Options{MinBackoff: c.MinBackoff, MaxBackoff: c.MaxBackoff}.withDefaults()
	c.MinBackoff, c.MaxBackoff = o.MinBackoff, o.MaxBackoff
	return c
}

// Consumer runs a handler over the deliveries of one queue with manual
// acknowledgements. Each delivery is settled exactly once, on the channel
// it came from, after its handler returned:
//
//   - nil: ack. The acks of a contiguous run of settled deliveries go out
//     as one basic.ack with multiple set, naming the last acked one, and
//     never past a delivery that is still being handled or was left
//     unsettled: after a crash it and every later delivery come back
//     (docs/architecture.md, rule 3).
//   - an error wrapping ErrPermanent: dead-lettered at once: OnDeadLetter
//     (if set) records it, a copy (body and properties intact, headers
//     x-last-error, x-attempt, x-dead-lettered-at and the origin added) is
//     published to DeadLetterQueue with a confirm through the queue's
//     CopiesExchange, and only then the original is acked;
//     if recording or publishing fails the original is requeued after the
//     first retry delay, so nothing is lost.
//   - another error, attempt < MaxAttempts: a copy (same body, properties
//     and headers, AttemptHeader = attempt+1, the origin added, persistent) is
//     published to the retry queue of level min(attempt, levels) through the
//     queue's CopiesExchange on a confirm-mode channel (a copy carries its
//     origin in headers, OriginOf); after the confirm the original is acked. If
//     that publish fails the original is requeued (nack), so nothing is lost.
//     The retry queue's TTL sends the copy back to the queue.
//   - another error at attempt >= MaxAttempts: dead-lettered, as for
//     ErrPermanent. The error is also logged with the message id.
//   - an error wrapping ErrUnavailable, or a failed publish of the retry
//     copy: not an attempt. The consumer pauses: it cancels its
//     subscription, takes no new delivery, and closes its channel once the
//     in-flight handlers returned, so the broker requeues this delivery and
//     the prefetched ones as they were (same attempt). It logs one WARN line,
//     reports ErrPaused from Ready and sets amqp_consumer_paused to 1, then
//     checks Probe (and that RetryConn is ready) with capped backoff until
//     both succeed, logs one WARN line with paused_ms and subscribes again.
//
// When the broker cancels the subscription (the queue was deleted) or the
// queue is missing when subscribing (404 NOT_FOUND), the consumer declares
// its Connection's topology again at once (queue, bindings, retry and
// dead-letter queues) and subscribes again. Messages that were inside a
// deleted queue are gone from the broker; the producer's outbox still holds
// them (docs/architecture.md, "Who declares what"). Bindings removed with a deleted
// exchange come back with the Connection's periodic declaration
// (Options.RedeclareInterval).
//
// A subscription that gets no delivery for ConsumerConfig.IdleResubscribe
// is replaced by a new one on a new channel, without a log line and without
// leaving the ready state: an idle queue costs a channel every interval, and
// a subscription the broker silently stopped serving (see IdleResubscribe)
// is repaired within it.
//
// Delivery is at least once (docs/architecture.md, rule 3): a delivery whose ack is lost
// with its channel comes again, so handlers must be idempotent (the inbox).
//
// Each delivery is handled in a CONSUMER span "process <queue>", a child of
// the traceparent (and tracestate) in its headers, with the OpenTelemetry
// messaging attributes; the handler's ctx holds it, so its spans and log lines
// join the producer's trace (docs/architecture.md, "Tracing"). Retried and
// dead-lettered copies keep the message's headers, and so its traceparent.
type Consumer struct {
	conn     *Connection
	cfg      ConsumerConfig
	handle   HandlerFunc
	logger   *slog.Logger
	metrics  consumerMetrics
	tracer   trace.Tracer
	spanName string // "process <queue>"
	retry    *Publisher
	running  atomic.Bool
	acked    atomic.Int64 // deliveries acked, to tell a pause that follows progress
	received atomic.Int64 // deliveries taken, to tell an idle subscription

	mu       sync.Mutex
	notReady error // why the consumer is not subscribed, nil when it is
}

// NewConsumer returns a Consumer of cfg.Queue on conn. It registers the
// consumer's metrics on reg (labels consumer and queue; collectors already
// registered by another Consumer are shared) and fails when cfg is invalid
// or registration fails. A nil reg registers nothing.
func NewConsumer(conn *Connection, cfg ConsumerConfig, h HandlerFunc, logger *slog.Logger, reg prometheus.Registerer) (*Consumer, error) {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Queue == "" || cfg.DeadLetterQueue == "":
		return nil, errors.New("amqp consumer: Queue and DeadLetterQueue are required")
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
	retryConn := cfg.RetryConn
	if retryConn == nil {
		retryConn = conn
	}
	return &Consumer{
		conn:     conn,
		cfg:      cfg,
		handle:   h,
		logger:   logger.With(slog.String("consumer", cfg.Name), slog.String("queue", cfg.Queue)),
		metrics:  m,
		tracer:   cfg.TracerProvider.Tracer(tracerName),
		spanName: "process " + cfg.Queue,
		retry:    NewPublisher(retryConn, CopiesExchange(cfg.Queue)),
		notReady: errors.New("not subscribed yet"),
	}, nil
}

// Ready reports whether the consumer is subscribed to its queue: nil when it
// is, an error wrapping ErrPaused (with the cause and the pause's duration in
// ms) while it waits for an unavailable dependency, or an error saying why it
// is not subscribed (for /readyz).
func (c *Consumer) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.notReady != nil {
		return fmt.Errorf("amqp consumer %s: %w", c.cfg.Name, c.notReady)
	}
	return nil
}

// setReady records whether the consumer is subscribed (why not, if err).
func (c *Consumer) setReady(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notReady = err
}

// pauseError ends a session because a dependency is unavailable.
type pauseError struct{ cause error }

func (e *pauseError) Error() string { return "dependency unavailable: " + e.cause.Error() }
func (e *pauseError) Unwrap() error { return e.cause }

// pause waits until the consumer's dependencies are back: Probe (if any)
// and the retry connection both ready, checked after each delay of b. It
// logs the start and the end of the pause once each and reports false when
// ctx ends first.
func (c *Consumer) pause(ctx context.Context, cause error, b *backoff.Backoff) bool {
	since := time.Now()
	c.setReady(fmt.Errorf("%w: %w (since %s)", ErrPaused, cause, since.UTC().Format(time.RFC3339)))
	c.metrics.paused.Set(1)
	defer c.metrics.paused.Set(0)
	c.logger.WarnContext(ctx, "amqp consumer paused: a dependency is unavailable; its deliveries stay in the queue",
		slog.Any("error", cause))
	for {
		if backoff.Sleep(ctx, b.NextBackOff()) != nil {
			return false
		}
		err := c.retry.conn.Ready()
		if err == nil && c.cfg.Probe != nil {
			pctx, cancel := context.WithTimeout(ctx, c.cfg.ProbeTimeout)
			err = c.cfg.Probe(pctx)
			cancel()
		}
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			c.logger.WarnContext(ctx, "amqp consumer resumed", slog.Int64("paused_ms", time.Since(since).Milliseconds()),
				slog.Any("cause", cause))
			return true
		}
		c.setReady(fmt.Errorf("%w: %w (for %d ms; last check: %v)", ErrPaused, cause, time.Since(since).Milliseconds(), err))
	}
}

// Run consumes until ctx ends, then shuts down gracefully and returns nil:
// it cancels the subscription, lets in-flight handlers finish and settles
// them (bounded by ShutdownTimeout), and closes its channels; unstarted
// prefetched deliveries go back to the queue. After a lost channel or
// connection it subscribes again with backoff; after a cancel from the
// broker or a missing queue it declares the topology and subscribes again at
// once; while a dependency is unavailable it pauses (see Consumer). It
// returns an error only when the Connection is closed or Run is already
// running.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("amqp consumer %s: already running", c.cfg.Name)
	}
	defer c.running.Store(false)
	defer func() { _ = c.retry.Close() }()

	hctx, release := withGrace(ctx, c.cfg.ShutdownTimeout)
	defer release()

	b := backoff.New(c.cfg.MinBackoff, c.cfg.MaxBackoff)
	// pb spaces the checks of a pause; it starts over only once a delivery
	// was acked since the last pause, so a dependency that fails again at
	// once is checked less and less often.
	pb := backoff.New(c.cfg.MinBackoff, c.cfg.MaxBackoff)
	acked := c.acked.Load()
	repaired := false // the last session failed on a missing queue, declared again
	for {
		subscribed, err := c.session(ctx, hctx)
		if ctx.Err() != nil {
			c.setReady(fmt.Errorf("not subscribed: %w", err))
			return nil
		}
		if errors.Is(err, errIdle) {
			continue
		}
		c.setReady(fmt.Errorf("not subscribed: %w", err))
		if errors.Is(err, ErrClosed) {
			return fmt.Errorf("amqp consumer %s: %w", c.cfg.Name, err)
		}
		if subscribed {
			b = backoff.New(c.cfg.MinBackoff, c.cfg.MaxBackoff)
		}
		var pe *pauseError
		switch {
		case errors.As(err, &pe):
			if now := c.acked.Load(); now != acked {
				pb, acked = backoff.New(c.cfg.MinBackoff, c.cfg.MaxBackoff), now
			}
			if !c.pause(ctx, pe.cause, pb) {
				return nil
			}
			continue
		case (errors.Is(err, errCancelled) || isNotFound(err)) && (subscribed || !repaired):
			if repaired = c.redeclare(ctx, err); repaired {
				continue
			}
		}
		repaired = false
		c.logger.WarnContext(ctx, "amqp consumer interrupted, subscribing again", slog.Any("error", err))
		if backoff.Sleep(ctx, b.NextBackOff()) != nil {
			return nil
		}
	}
}

// redeclare declares the queue, gone with err, again at once (and the rest of
// the topology) instead of waiting for someone else to, and logs what happened.
// It reports whether the declaration succeeded.
func (c *Consumer) redeclare(ctx context.Context, err error) bool {
	if rerr := c.conn.Redeclare(ctx); rerr != nil {
		c.logger.WarnContext(ctx, "amqp consumer: the queue is missing and declaring it again failed",
			slog.Any("error", err), slog.Any("declare_error", rerr))
		return false
	}
	c.logger.WarnContext(ctx, "amqp consumer: the queue was missing; declared the topology again, subscribing again",
		slog.Any("error", err))
	return true
}

// errCancelled means the broker cancelled the subscription (basic.cancel),
// which it does when the queue is deleted.
var errCancelled = errors.New("subscription cancelled by the broker")

// errIdle means the subscription got no delivery for IdleResubscribe.
var errIdle = errors.New("no delivery within the idle interval")

// session subscribes once on a new channel and runs the workers until ctx
// ends or the subscription is lost. subscribed reports whether it got as
// far as consuming.
func (c *Consumer) session(ctx, hctx context.Context) (subscribed bool, err error) {
	ch, err := c.conn.Channel(ctx)
	if err != nil {
		return false, err
	}
	// Closing returns unsettled deliveries to the queue. It does not wait
	// for the broker, nor do the calls below wait past ctx: a broker that
	// blocks a shared connection answers nothing.
	defer c.conn.closeChannel(ch)

	if err := c.conn.await(ctx, func() error { return ch.Qos(c.cfg.Prefetch, 0, false) }); err != nil {
		return false, fmt.Errorf("qos: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	cancelled := ch.NotifyCancel(make(chan string, 1))
	tag := c.cfg.Name + "-" + rand.Text()[:12]
	var deliveries <-chan amqp091.Delivery
	err = c.conn.await(ctx, func() (err error) {
		deliveries, err = ch.Consume(c.cfg.Queue, tag, false, false, false, false, nil)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("consume %s: %w", c.cfg.Queue, err)
	}

	stop := make(chan struct{})
	unavailable := make(chan error, 1)
	acks := newAcker(ch)
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() { c.work(hctx, stop, deliveries, acks, unavailable) })
	}
	c.setReady(nil)

	err = c.wait(ctx, ch, tag, closed, cancelled, unavailable)
	close(stop)
	wg.Wait()
	return true, err
}

// wait waits until the subscription tag on ch ends and says why: nil when
// ctx ended, errIdle when no delivery came for IdleResubscribe, a
// *pauseError when a handler found a dependency unavailable, or the lost
// channel or the broker's cancel. It cancels the subscription itself in the
// first three cases.
func (c *Consumer) wait(ctx context.Context, ch *amqp091.Channel, tag string,
	closed <-chan *amqp091.Error, cancelled <-chan string, unavailable <-chan error) error {
	var idle <-chan time.Time
	if c.cfg.IdleResubscribe > 0 {
		t := time.NewTicker(c.cfg.IdleResubscribe)
		defer t.Stop()
		idle = t.C
	}
	seen := c.received.Load()
	for {
		select {
		case <-idle:
			if now := c.received.Load(); now != seen {
				seen = now
				continue
			}
			c.cancel(ch, tag)
			return errIdle
		case <-ctx.Done():
			// Stop the flow first so the broker sends nothing new, then let
			// the in-flight handlers finish and ack on the still-open channel.
			c.cancel(ch, tag)
			return nil
		case e := <-closed:
			if e != nil {
				return fmt.Errorf("channel closed: %w", e)
			}
			return errors.New("channel closed")
		case <-cancelled:
			return fmt.Errorf("%w (consumer tag %s)", errCancelled, tag)
		case cause := <-unavailable:
			// Take nothing more; the deliveries left unsettled go back to the
			// queue as they were when the channel closes.
			c.cancel(ch, tag)
			return &pauseError{cause: cause}
		}
	}
}

// cancel ends the subscription tag on ch (basic.cancel), waiting at most
// ProbeTimeout for the broker's answer.
func (c *Consumer) cancel(ch *amqp091.Channel, tag string) {
	ctx, done := context.WithTimeout(context.Background(), c.cfg.ProbeTimeout)
	defer done()
	if err := c.conn.await(ctx, func() error { return ch.Cancel(tag, false) }); err != nil {
		c.logger.Warn("amqp consumer cancel failed", slog.Any("error", err))
	}
}

// work handles deliveries until stop is closed or the subscription ends.
// It takes no new delivery once stop is closed. A delivery that failed for
// an unavailable dependency is left unsettled and its cause sent to
// unavailable (if that is free), which pauses the session. Every delivery is
// settled through acks, which acknowledges contiguous runs together.
func (c *Consumer) work(ctx context.Context, stop <-chan struct{}, deliveries <-chan amqp091.Delivery, acks *acker, unavailable chan<- error) {
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
			c.received.Add(1)
			d.Acknowledger = acks
			if cause := c.process(ctx, &d); cause != nil {
				select {
				case unavailable <- cause:
				default:
				}
			}
		}
	}
}

// process handles d and settles it, except when a dependency is unavailable
// (ErrUnavailable, or the retry publish failed): it then returns the cause
// and leaves d unsettled, for the broker to requeue when the channel closes.
func (c *Consumer) process(ctx context.Context, d *amqp091.Delivery) (unavailable error) {
	attempt := AttemptOf(d.Headers[c.cfg.AttemptHeader])
	origin := OriginOf(c.cfg.Queue, d.Exchange, d.UserId, d.Headers)
	ctx, span := c.startProcess(ctx, d)
	defer span.End()
	c.metrics.inFlight.Inc()
	start := time.Now()
	err := c.call(ctx, Delivery{
		Body: d.Body, MessageID: d.MessageId, Type: d.Type, RoutingKey: d.RoutingKey,
		CorrelationID: d.CorrelationId, Timestamp: d.Timestamp, Headers: d.Headers,
		Attempt: attempt, Redelivered: d.Redelivered, ContentType: d.ContentType, Origin: origin,
	})
	c.metrics.duration.Observe(time.Since(start).Seconds())
	c.metrics.inFlight.Dec()
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}

	if err == nil {
		c.metrics.processed.Inc()
		c.acked.Add(1)
		if aerr := d.Ack(false); aerr != nil {
			settle(ctx, c.deliveryLogger(d, attempt), "ack", aerr)
		}
		return nil
	}
	return c.failed(ctx, d, attempt, err)
}

// failed settles d after its handler returned err: back to the queue unsettled
// for an unavailable dependency (returning the cause) or a shutdown, to the
// dead-letter path for a permanent failure or the last attempt, else to the retry
// queue of its attempt.
func (c *Consumer) failed(ctx context.Context, d *amqp091.Delivery, attempt int, err error) (unavailable error) {
	// Built only off the success path: a logger With attributes costs
	// allocations and encoding on every delivery.
	log := c.deliveryLogger(d, attempt)
	if attrs := logging.ErrorAttrs(err); len(attrs) > 0 {
		args := make([]any, len(attrs))
		for i, a := range attrs {
			args[i] = a
		}
		log = log.With(args...)
	}
	switch {
	case errors.Is(err, ErrUnavailable):
		log.WarnContext(ctx, "dependency unavailable; the delivery goes back to the queue, not counted as an attempt", slog.Any("error", err))
		return err
	case ctx.Err() != nil:
		// The shutdown grace period is over and cut the handler short: not
		// the message's fault. Left unsettled, it goes back to the queue.
		log.WarnContext(ctx, "handler stopped by the shutdown; the delivery goes back to the queue", slog.Any("error", err))
		return nil
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
			// Nothing may be lost and the retry path is infrastructure: the
			// delivery goes back to its queue as it was and the consumer
			// pauses until the retry connection is ready again.
			log.WarnContext(ctx, "retry publish failed; the delivery goes back to the queue and the consumer pauses",
				slog.Any("error", err), slog.Any("publish_error", perr), slog.Duration("delay", delay))
			return fmt.Errorf("%w: publish to retry queue %s: %w", ErrUnavailable, queue, perr)
		}
		log.WarnContext(ctx, "handler failed, retrying later", slog.Any("error", err), slog.String("retry_queue", queue))
		c.metrics.retries.Inc()
		settle(ctx, log, "ack", ackAlone(d))
	}
	return nil
}

// deliveryLogger is the consumer's logger with d's message_id, type and attempt.
func (c *Consumer) deliveryLogger(d *amqp091.Delivery, attempt int) *slog.Logger {
	return c.logger.With(slog.String("message_id", d.MessageId), slog.String("type", d.Type), slog.Int("attempt", attempt))
}

// call runs the handler, turning a panic into an ordinary (retried) error.
// publishRetry publishes the copy of d for its next attempt to the retry queue
// and waits for the broker's confirm. When the broker returns it (the retry
// queue is missing), it declares the topology again and tries once more.
func (c *Consumer) publishRetry(ctx context.Context, queue string, d *amqp091.Delivery, attempt int) error {
	return c.publishCopy(ctx, queue, retryCopy(d, c.cfg.Queue, c.cfg.AttemptHeader, attempt+1))
}

// publishCopy publishes msg to queue through the queue's CopiesExchange and waits
// for the broker's confirm, declaring the topology again once when the
// broker returns it (the queue is missing).
func (c *Consumer) publishCopy(ctx context.Context, queue string, msg amqp091.Publishing) error {
	err := c.retry.Publish(ctx, queue, msg, c.cfg.RetryConfirmTimeout)
	if !errors.Is(err, ErrReturned) {
		return err
	}
	if derr := c.conn.Redeclare(ctx); derr != nil {
		return errors.Join(err, derr)
	}
	return c.retry.Publish(ctx, queue, msg, c.cfg.RetryConfirmTimeout)
}

func (c *Consumer) call(ctx context.Context, d Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.logger.ErrorContext(ctx, "handler panic", slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return c.handle(ctx, d)
}

// settle logs a failed ack/nack/reject: the channel is gone, so the broker
// will deliver the message again.
func settle(ctx context.Context, log *slog.Logger, op string, err error) {
	if err != nil {
		log.WarnContext(ctx, "amqp "+op+" failed; the message will be redelivered", slog.Any("error", err))
	}
}

// retryCopy is CopyOf d with header = attempt.
func retryCopy(d *amqp091.Delivery, queue, header string, attempt int) amqp091.Publishing {
	msg := CopyOf(d, queue)
	msg.Headers[header] = int32(attempt)
	return msg
}

// CopyOf is d, consumed from queue or from its dead-letter queue, as a new
// persistent message: body, properties and headers as they are, with d's origin
// in its headers (OriginOf) and no user_id: the broker would refuse another
// user's, and the origin travels in the headers, which only the consuming
// service writes (CopiesExchange). Retry, dead-letter and replayed copies are
// made with it (docs/architecture.md, rule 8).
func CopyOf(d *amqp091.Delivery, queue string) amqp091.Publishing {
	headers := make(amqp091.Table, len(d.Headers)+3)
	for k, v := range d.Headers {
		headers[k] = v
	}
	OriginOf(queue, d.Exchange, d.UserId, d.Headers).Stamp(headers)
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
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

// AttemptOf reads the value v of an attempt header (ConsumerConfig.AttemptHeader)
// as the Consumer counts it: a whole number from 1 to 2^30, as any AMQP integer
// type or decimal text; missing or anything else means 1.
func AttemptOf(v any) int {
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
	inFlight, paused                           prometheus.Gauge
}

func newConsumerMetrics(reg prometheus.Registerer, name, queue string) (consumerMetrics, error) {
	labels := []string{"consumer", "queue"}
	counter := func(metric, help string) (*prometheus.CounterVec, error) {
		return metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "amqp", Subsystem: "consumer", Name: metric, Help: help,
		}, labels))
	}
	processed, err1 := counter("processed_total", "Deliveries handled successfully and acked.")
	failures, err2 := counter("failures_total", "Deliveries whose handler returned an error.")
	retries, err3 := counter("retries_total", "Failed deliveries moved to a retry queue.")
	dead, err4 := counter("dead_lettered_total", "Deliveries copied to the dead-letter queue.")
	duration, err5 := metrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "amqp", Subsystem: "consumer", Name: "handler_duration_seconds",
		Help: "Time spent in the handler, in seconds.", Buckets: prometheus.DefBuckets,
	}, labels))
	inFlight, err6 := metrics.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "amqp", Subsystem: "consumer", Name: "in_flight",
		Help: "Deliveries being handled right now.",
	}, labels))
	paused, err7 := metrics.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "amqp", Subsystem: "consumer", Name: "paused",
		Help: "1 while the consumer waits for an unavailable dependency (database, retry path), else 0.",
	}, labels))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return consumerMetrics{}, err
	}
	return consumerMetrics{
		processed:    processed.WithLabelValues(name, queue),
		failures:     failures.WithLabelValues(name, queue),
		retries:      retries.WithLabelValues(name, queue),
		deadLettered: dead.WithLabelValues(name, queue),
		duration:     duration.WithLabelValues(name, queue),
		inFlight:     inFlight.WithLabelValues(name, queue),
		paused:       paused.WithLabelValues(name, queue),
	}, nil
}
