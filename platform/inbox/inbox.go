// Package inbox makes event consumers idempotent: it records each event's id in the
// processed_event table in the same PostgreSQL transaction as the effects of the
// event's handlers, so a redelivered event is recognised and skipped (DESIGN.md rule 3).
//
// The table it writes is owned by each service's migrations:
//
//	CREATE TABLE processed_event (
//	    consumer     text        NOT NULL,
//	    event_id     uuid        NOT NULL,
//	    processed_at timestamptz NOT NULL DEFAULT now(),
//	    PRIMARY KEY (consumer, event_id)
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
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/pg"
)

// Handler applies the effect of one event inside tx, the transaction that also holds
// the event's processed_event key. It must do all its work through tx and must not
// commit or roll it back; an error rolls back the effect together with the key, so the
// event is processed again on its next delivery. Handlers must not call the network
// (a broker, another service) inside tx.
type Handler func(ctx context.Context, tx pgx.Tx, env contracts.Envelope) error

// Errors returned by Process before any transaction is opened. An event that fails with
// one of them can never succeed, and HandleDelivery dead-letters it at once.
var (
	// ErrNoEventID means the envelope's event_id is the nil UUID.
	ErrNoEventID = errors.New("event has no event_id")
	// ErrNoHandler means no Handler is registered for the envelope's event_name.
	ErrNoHandler = errors.New("no handler registered for the event")
)

// Inbox runs the handlers of one consumer exactly once per event_id. Register every
// Handler before the first call to Process or HandleDelivery; after that an Inbox is
// safe for concurrent use, and concurrent calls for the same event_id serialise on
// the processed_event primary key.
type Inbox struct {
	pool      *pgxpool.Pool
	consumer  string
	validator *contracts.Validator
	logger    *slog.Logger
	metrics   *metrics
	batch     *batcher // nil: one transaction per event

	mu       sync.RWMutex
	handlers map[string][]Handler
}

// New returns an Inbox that records keys as consumer (for example "stock") in the
// processed_event table of pool's database, decodes deliveries with v, logs to logger
// (nil discards) and registers its metrics on reg (nil registers nothing):
//
//	inbox_processed_total{consumer}            events whose handlers committed
//	inbox_duplicates_total{consumer}           events skipped because their key existed
//	inbox_failures_total{consumer,reason}      reason "invalid" (dead-lettered at once) or "error" (retried)
//	inbox_handler_duration_seconds{consumer}   time of the whole transaction, in seconds
//
// Several Inboxes may share one registry; the collectors are then shared too. A
// registry that holds other collectors under these names is logged as an error and the
// Inbox then counts without exporting.
//
// Options change how events are committed; see WithGroupCommit.
func New(pool *pgxpool.Pool, consumer string, v *contracts.Validator, logger *slog.Logger, reg prometheus.Registerer, opts ...Option) *Inbox {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	i := &Inbox{
		pool:      pool,
		consumer:  consumer,
		validator: v,
		logger:    logger.With("consumer", consumer),
		metrics:   newMetrics(reg, consumer, logger),
		handlers:  make(map[string][]Handler),
	}
	for _, opt := range opts {
		opt(i)
	}
	return i
}

// Consumer returns the consumer name the Inbox records its keys under.
func (i *Inbox) Consumer() string { return i.consumer }

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

// insertKey is the whole deduplication: the insert either adds the key (the event is
// new) or does nothing (it was processed before). A concurrent transaction holding the
// same key makes it wait until that one commits (then nothing is inserted) or rolls
// back (then this one inserts). It never raises a unique violation, which would abort
// the transaction (SQLSTATE 25P02) and is therefore never caught.
const insertKey = `INSERT INTO processed_event (consumer, event_id, processed_at)
VALUES ($1, $2, now())
ON CONFLICT DO NOTHING`

// Process handles env once for this consumer (DESIGN.md rule 3). In one READ COMMITTED
// transaction it inserts the key (consumer, env.EventID) into processed_event; when the
// key already exists it commits nothing else and returns duplicate = true without
// running any handler. Otherwise it runs every Handler registered for env.EventName in
// the same transaction and commits.
//
// It returns ErrNoEventID or ErrNoHandler (wrapped) without touching the database when
// env cannot be processed at all, and the handler's or the database's error (wrapped)
// when the transaction rolled back; the key is then gone with the effect and a later
// delivery processes env again.
func (i *Inbox) Process(ctx context.Context, env contracts.Envelope) (duplicate bool, err error) {
	if env.EventID == uuid.Nil {
		return false, fmt.Errorf("inbox %s: %s: %w", i.consumer, env.EventName, ErrNoEventID)
	}
	handlers := i.handlersFor(env.EventName)
	if len(handlers) == 0 {
		return false, fmt.Errorf("inbox %s: event %s (%s): %w", i.consumer, env.EventID, env.EventName, ErrNoHandler)
	}

	if i.batch != nil {
		return i.batch.submit(ctx, env, handlers)
	}
	return i.processOne(ctx, env, handlers)
}

// processOne handles env in a transaction of its own.
func (i *Inbox) processOne(ctx context.Context, env contracts.Envelope, handlers []Handler) (duplicate bool, err error) {
	start := time.Now()
	err = pg.WithTx(ctx, i.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, insertKey, i.consumer, env.EventID)
		if err != nil {
			return fmt.Errorf("record key: %w", err)
		}
		if tag.RowsAffected() == 0 {
			duplicate = true
			return nil
		}
		return runHandlers(ctx, tx, env, handlers)
	})
	return i.record(env, duplicate, err, time.Since(start))
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

// record counts the outcome of one event whose transaction took d and returns it, the
// error wrapped with the consumer and event id.
func (i *Inbox) record(env contracts.Envelope, duplicate bool, err error, d time.Duration) (bool, error) {
	i.metrics.duration.Observe(d.Seconds())
	switch {
	case err != nil:
		i.metrics.failed.Inc()
		return false, fmt.Errorf("inbox %s: event %s: %w", i.consumer, env.EventID, err)
	case duplicate:
		i.metrics.duplicates.Inc()
	default:
		i.metrics.processed.Inc()
	}
	return duplicate, nil
}

// eventLogger returns the Inbox's logger with the event's id and correlation id.
func (i *Inbox) eventLogger(env contracts.Envelope) *slog.Logger {
	return logging.WithEvent(i.logger, env.EventID.String(), env.CorrelationID)
}

type metrics struct {
	processed  prometheus.Counter
	duplicates prometheus.Counter
	failed     prometheus.Counter
	invalid    prometheus.Counter
	duration   prometheus.Observer
}

func newMetrics(reg prometheus.Registerer, consumer string, logger *slog.Logger) *metrics {
	processed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "inbox_processed_total",
		Help: "Events whose handlers ran and committed, per consumer.",
	}, []string{"consumer"})
	duplicates := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "inbox_duplicates_total",
		Help: "Events skipped because their key was already in processed_event, per consumer.",
	}, []string{"consumer"})
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "inbox_failures_total",
		Help: `Events not processed, per consumer and reason: "invalid" (undecodable or unhandled, dead-lettered at once) or "error" (rolled back, retried).`,
	}, []string{"consumer", "reason"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "inbox_handler_duration_seconds",
		Help:    "Duration of the inbox transaction (key insert, handlers, commit), in seconds, per consumer.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"consumer"})
	if reg != nil {
		processed = register(reg, processed, logger)
		duplicates = register(reg, duplicates, logger)
		failures = register(reg, failures, logger)
		duration = register(reg, duration, logger)
	}
	return &metrics{
		processed:  processed.WithLabelValues(consumer),
		duplicates: duplicates.WithLabelValues(consumer),
		failed:     failures.WithLabelValues(consumer, "error"),
		invalid:    failures.WithLabelValues(consumer, "invalid"),
		duration:   duration.WithLabelValues(consumer),
	}
}

// register registers c on reg and returns it, or returns the equal collector
// registered before. On any other error it logs and returns c unregistered.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, logger *slog.Logger) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	logger.Error("inbox metrics not exported", "error", err)
	return c
}
