// Package inbox makes message consumers idempotent: it records each message's key in
// the processed_event table in the same PostgreSQL transaction as the message's
// effect, so a redelivered message is recognised and not applied again, and a failed
// one is processed again (docs/architecture.md, rule 3).
//
// Consumer.Handle (or the function Handle) is the whole library for any broker or
// HTTP handler: one call, one transaction, with the modes Skip, Fail and
// ReturnStored and a content check. Package msgkey reads keys from CloudEvents, AMQP
// and HTTP messages. Inbox builds on it for this project's event envelopes: it
// decodes AMQP deliveries, runs the handlers registered per event name and can
// group commits.
//
// The table is owned by each service's migrations:
//
//	CREATE TABLE processed_event (
//	    consumer       text        NOT NULL,
//	    message_key    text        NOT NULL,  -- at most 255 bytes (msgkey.MaxLen)
//	    payload_sha256 bytea,                 -- NULL: content unknown, never a conflict
//	    result         jsonb,                 -- mode ReturnStored
//	    processed_at   timestamptz NOT NULL DEFAULT now(),
//	    PRIMARY KEY (consumer, message_key)
//	);
//	CREATE INDEX processed_event_processed_at_idx ON processed_event (processed_at);
//
// Package inboxtest holds the test suite a service runs against its own migrations.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/logging"
	platformmetrics "example.com/shop/platform/metrics"
)

// Handler applies the effect of one event inside tx, the transaction that also holds
// the event's processed_event key. It must do all its work through tx and must not
// commit or roll it back; an error rolls back the effect together with the key, so the
// event is processed again on its next delivery. Handlers must not call the network
// (a broker, another service) inside tx.
type Handler func(ctx context.Context, tx pgx.Tx, env contracts.Envelope) error

// Errors returned by Process before any transaction is opened. An event that fails with
// one of them can never succeed (Permanent reports them), and HandleDelivery
// dead-letters it at once.
var (
	// ErrNoEventID means the envelope's event_id is the nil UUID.
	ErrNoEventID = errors.New("event has no event_id")
	// ErrNoHandler means no Handler is registered for the envelope's event_name.
	ErrNoHandler = errors.New("no handler registered for the event")
)

// Inbox runs the handlers of one consumer exactly once per event. Its key is the
// envelope's event_id in canonical lower-case text (msgkey.EventID), its content the
// envelope re-encoded as compact JSON, so a copy of the event with the same event_id
// and another content is a conflict (dead-lettered), never applied. Register every
// Handler before the first call to Process or HandleDelivery; after that an Inbox is
// safe for concurrent use, and concurrent calls for the same event serialise on the
// processed_event primary key.
type Inbox struct {
	pool      *pgxpool.Pool
	consumer  *Consumer
	validator *contracts.Validator
	logger    *slog.Logger
	batch     *batcher // nil: one transaction per event

	mu       sync.RWMutex
	handlers map[string][]Handler
}

// New returns an Inbox that records keys as consumer (for example "stock") in mode
// Skip in the processed_event table of pool's database, decodes deliveries with v,
// logs to logger (nil discards) and registers the counters NewConsumer lists on reg
// (nil registers nothing). Several Inboxes may share one registry; the collectors
// are then shared too. A registry that holds other collectors under these names is
// logged as an error and the Inbox then counts without exporting.
//
// Options change how events are committed; see WithGroupCommit.
func New(pool *pgxpool.Pool, consumer string, v *contracts.Validator, logger *slog.Logger, reg prometheus.Registerer, opts ...Option) *Inbox {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	i := &Inbox{
		pool:      pool,
		consumer:  NewConsumer(Config{Name: consumer, Logger: logger, Registerer: reg}),
		validator: v,
		logger:    logger.With("consumer", consumer),
		handlers:  make(map[string][]Handler),
	}
	for _, opt := range opts {
		opt(i)
	}
	return i
}

// Consumer returns the consumer name the Inbox records its keys under.
func (i *Inbox) Consumer() string { return i.consumer.name }

// Register adds h to the handlers of eventName. Handlers of one event run in the order
// they were registered, all in one transaction. Register panics on a nil h, a
// programming error.
func (i *Inbox) Register(eventName string, h Handler) {
	if h == nil {
		panic("inbox: Register with a nil handler for " + eventName)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.handlers[eventName] = append(i.handlers[eventName], h)
}

func (i *Inbox) handlersFor(eventName string) []Handler {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.handlers[eventName]
}

// message is the inbox Message of env: its event_id as text, its compact JSON as
// content.
func message(env contracts.Envelope) (Message, error) {
	// The bytes json.Marshal(env) gives, without its second pass: MarshalJSON's
	// output is already compact and HTML-escaped.
	content, err := env.MarshalJSON()
	if err != nil {
		return Message{}, fmt.Errorf("encode envelope: %w", err)
	}
	return Message{Key: env.EventID.String(), Content: content}, nil
}

// Process handles env once for this consumer (docs/architecture.md, rule 3) through
// Consumer.Handle: in one READ COMMITTED transaction it inserts the key (consumer,
// env.EventID) into processed_event; when the key already exists it commits nothing
// else and returns duplicate = true without running any handler. Otherwise it runs
// every Handler registered for env.EventName in the same transaction and commits.
//
// It returns ErrNoEventID or ErrNoHandler (wrapped) without touching the database when
// env cannot be processed at all, a *ConflictError when the event_id was processed
// with another content, and the handler's or the database's error (wrapped) when the
// transaction rolled back; the key is then gone with the effect and a later delivery
// processes env again.
func (i *Inbox) Process(ctx context.Context, env contracts.Envelope) (duplicate bool, err error) {
	if env.EventID == uuid.Nil {
		return false, fmt.Errorf("inbox %s: %s: %w", i.consumer.name, env.EventName, ErrNoEventID)
	}
	handlers := i.handlersFor(env.EventName)
	if len(handlers) == 0 {
		return false, fmt.Errorf("inbox %s: event %s (%s): %w", i.consumer.name, env.EventID, env.EventName, ErrNoHandler)
	}
	m, err := message(env)
	if err != nil {
		return false, fmt.Errorf("inbox %s: event %s: %w", i.consumer.name, env.EventID, err)
	}
	if i.batch != nil {
		return i.batch.submit(ctx, env, m, handlers)
	}
	return i.processOne(ctx, env, m, handlers)
}

// processOne handles env in a transaction of its own.
func (i *Inbox) processOne(ctx context.Context, env contracts.Envelope, m Message, handlers []Handler) (duplicate bool, err error) {
	out, err := i.consumer.Handle(ctx, i.pool, m, func(ctx context.Context, tx pgx.Tx) (any, error) {
		return nil, runHandlers(ctx, tx, env, handlers)
	})
	return out.Duplicate, err
}

// runHandlers runs every handler of env in tx, stopping at the first error.
func runHandlers(ctx context.Context, tx pgx.Tx, env contracts.Envelope, handlers []Handler) error {
	for n, h := range handlers {
		if err := h(ctx, tx, env); err != nil {
			return fmt.Errorf("handler %d of %s: %w", n+1, env.EventName, err)
		}
	}
	return nil
}

// eventLogger returns the Inbox's logger with the event's id and correlation id.
func (i *Inbox) eventLogger(env contracts.Envelope) *slog.Logger {
	return logging.WithEvent(i.logger, env.EventID.String(), env.CorrelationID)
}

type metrics struct {
	processed  prometheus.Counter
	duplicates prometheus.Counter
	conflicts  prometheus.Counter
	failed     prometheus.Counter
	invalid    prometheus.Counter
	duration   prometheus.Observer
}

func newMetrics(reg prometheus.Registerer, consumer string, logger *slog.Logger) *metrics {
	processed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "inbox_processed_total",
		Help: "Messages whose effect ran and committed, per consumer.",
	}, []string{"consumer"})
	duplicates := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "inbox_duplicates_total",
		Help: "Messages not applied because their key was already in processed_event, per consumer.",
	}, []string{"consumer"})
	conflicts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "inbox_conflicts_total",
		Help: "Messages refused because their key was processed with another content, per consumer.",
	}, []string{"consumer"})
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "inbox_failures_total",
		Help: `Messages not processed, per consumer and reason: "invalid" (no key, undecodable or unhandled, dead-lettered at once) or "error" (rolled back, retried).`,
	}, []string{"consumer", "reason"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "inbox_handler_duration_seconds",
		Help:    "Duration of the inbox transaction (key insert, handlers, commit), in seconds, per consumer.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"consumer"})
	if reg != nil {
		processed = register(reg, processed, logger)
		duplicates = register(reg, duplicates, logger)
		conflicts = register(reg, conflicts, logger)
		failures = register(reg, failures, logger)
		duration = register(reg, duration, logger)
	}
	return &metrics{
		processed:  processed.WithLabelValues(consumer),
		duplicates: duplicates.WithLabelValues(consumer),
		conflicts:  conflicts.WithLabelValues(consumer),
		failed:     failures.WithLabelValues(consumer, "error"),
		invalid:    failures.WithLabelValues(consumer, "invalid"),
		duration:   duration.WithLabelValues(consumer),
	}
}

// register registers c on reg (platform metrics.Register) and returns it, or the equal collector
// registered before. On any other error it logs and returns c unregistered.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, logger *slog.Logger) C {
	c, err := platformmetrics.Register(reg, c)
	if err != nil {
		logger.Error("inbox metrics not exported", "error", err)
	}
	return c
}
