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
// The table ships with the package (migrations/00001_processed_event.sql): a service
// lists Migrations in the schema its migrate applies.
//
// Package inboxtest holds the test suite a service runs against its schema.
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
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

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

// GroupHandler applies the effects of one or more new events of one event name in
// tx, the transaction that also holds their processed_event keys: envs are in the
// order their deliveries reached the group, and none of them is a duplicate. It
// lets a handler write the effects of many events in a few set-based statements
// (one multi-row statement instead of one per event) where a Handler makes a round
// trip per statement and event. The rules of Handler apply: all work through tx, no
// commit or rollback, no network call.
//
// Its error decides what happens to the events (docs/architecture.md, rule 3):
//
//   - nil: every event's effect is written; they commit with their keys.
//   - an error made by EventFailed(n, err): event envs[n] alone fails with err
//     (retried, or dead-lettered when err is permanent); the transaction is rolled
//     back and the other events are committed again without it.
//   - any other error: when envs holds one event, that event fails with it; when it
//     holds several, the transaction is rolled back and each event is processed
//     again alone (a call with one event), so the error is attributed to the event
//     that causes it.
//
// A call with one event is also how an Inbox without group commit runs it.
type GroupHandler func(ctx context.Context, tx pgx.Tx, envs []contracts.Envelope) error

// EventFailed returns the error a GroupHandler returns to fail envs[n] alone with
// err: for example a payload that can never be applied (wrap ErrPermanent in err).
func EventFailed(n int, err error) error {
	return &eventFailure{index: n, err: err}
}

// eventFailure is the error of EventFailed.
type eventFailure struct {
	index int
	err   error
}

func (e *eventFailure) Error() string {
	return fmt.Sprintf("event %d of the group: %v", e.index, e.err)
}
func (e *eventFailure) Unwrap() error { return e.err }

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
	tracer    trace.Tracer
	spanName  string        // "inbox <consumer>"
	timeout   time.Duration // bounds the database work of one delivery

	mu     sync.RWMutex
	routes map[string]route
}

// route is what runs for one event name: its GroupHandler if any, then its
// Handlers in order.
type route struct {
	handlers []Handler
	group    GroupHandler
}

func (r route) empty() bool { return len(r.handlers) == 0 && r.group == nil }

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
		routes:    make(map[string]route),
		tracer:    defaultTracer(),
		spanName:  "inbox " + consumer,
		timeout:   DefaultTimeout,
	}
	for _, opt := range opts {
		opt(i)
	}
	return i
}

// Consumer returns the consumer name the Inbox records its keys under.
func (i *Inbox) Consumer() string { return i.consumer.name }

// Register adds h to the handlers of eventName. Handlers of one event run in the order
// they were registered, all in one transaction, after the event's GroupHandler if it
// has one. Register panics on a nil h, a programming error.
func (i *Inbox) Register(eventName string, h Handler) {
	if h == nil {
		panic("inbox: Register with a nil handler for " + eventName)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	r := i.routes[eventName]
	r.handlers = append(r.handlers, h)
	i.routes[eventName] = r
}

// RegisterGroup makes h the first handler of eventName: with group commit
// (WithGroupCommit) the new events of that name in one group are given to one call
// of h, otherwise each event to a call of its own; Handlers registered for the name
// afterwards run after it, for each event. RegisterGroup panics on a nil h or a name
// that has a handler already, programming errors.
func (i *Inbox) RegisterGroup(eventName string, h GroupHandler) {
	if h == nil {
		panic("inbox: RegisterGroup with a nil handler for " + eventName)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.routes[eventName].empty() {
		panic("inbox: RegisterGroup for " + eventName + ", which has a handler already")
	}
	i.routes[eventName] = route{group: h}
}

func (i *Inbox) routeFor(eventName string) route {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.routes[eventName]
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
//
// The transaction runs in a span "inbox <consumer>", and each handler in a span
// "handle <event name>" below it, children of the span in ctx (docs/architecture.md,
// "Tracing").
func (i *Inbox) Process(ctx context.Context, env contracts.Envelope) (duplicate bool, err error) {
	if env.EventID == uuid.Nil {
		return false, fmt.Errorf("inbox %s: %s: %w", i.consumer.name, env.EventName, ErrNoEventID)
	}
	handlers := i.routeFor(env.EventName)
	if handlers.empty() {
		return false, fmt.Errorf("inbox %s: event %s (%s): %w", i.consumer.name, env.EventID, env.EventName, ErrNoHandler)
	}
	m, err := message(env)
	if err != nil {
		return false, fmt.Errorf("inbox %s: event %s: %w", i.consumer.name, env.EventID, err)
	}
	ctx, span := i.startProcess(ctx, env)
	defer func() { endSpan(span, duplicate, err) }()
	if i.batch != nil {
		return i.batch.submit(ctx, env, m, handlers)
	}
	return i.processOne(ctx, env, m, handlers)
}

// processOne handles env in a transaction of its own.
func (i *Inbox) processOne(ctx context.Context, env contracts.Envelope, m Message, handlers route) (duplicate bool, err error) {
	out, err := i.consumer.Handle(ctx, i.pool, m, func(ctx context.Context, tx pgx.Tx) (any, error) {
		if handlers.group != nil {
			err := i.runGroup(ctx, tx, []contracts.Envelope{env}, []trace.Span{trace.SpanFromContext(ctx)}, handlers.group)
			if err != nil {
				return nil, err
			}
		}
		return nil, i.runHandlers(ctx, tx, env, handlers.handlers)
	})
	return out.Duplicate, err
}

// runGroup runs h over envs in tx, each event in a span "handle <event name>" that
// covers the call, below the event's inbox span in parents. The error of an
// EventFailed for the only event is returned as the plain error.
func (i *Inbox) runGroup(ctx context.Context, tx pgx.Tx, envs []contracts.Envelope, parents []trace.Span, h GroupHandler) error {
	spans := make([]trace.Span, len(envs))
	hctx := ctx
	for n := range envs {
		var sctx context.Context
		sctx, spans[n] = i.tracer.Start(trace.ContextWithSpan(ctx, parents[n]), "handle "+envs[n].EventName)
		if n == 0 {
			hctx = sctx
		}
	}
	err := h(hctx, tx, envs)
	var ef *eventFailure
	for n, span := range spans {
		if err != nil && (!errors.As(err, &ef) || ef.index == n) {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	if err == nil {
		return nil
	}
	if errors.As(err, &ef) && (ef.index < 0 || ef.index >= len(envs)) {
		return fmt.Errorf("handler of %s: EventFailed(%d) for a group of %d: %w", envs[0].EventName, ef.index, len(envs), ef.err)
	}
	if len(envs) == 1 && ef != nil {
		err = ef.err
	}
	return fmt.Errorf("handler of %s: %w", envs[0].EventName, err)
}

// runHandlers runs every handler of env in tx, stopping at the first error.
func (i *Inbox) runHandlers(ctx context.Context, tx pgx.Tx, env contracts.Envelope, handlers []Handler) error {
	for n, h := range handlers {
		if err := i.runHandler(ctx, tx, env, h); err != nil {
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
