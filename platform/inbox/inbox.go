// Package inbox makes message consumers idempotent: it records each message's key in
// the processed_event table in the same PostgreSQL transaction as the message's
// effect, so a redelivered message is recognised and not applied again, and a failed
// one is processed again (docs/architecture.md, rule 3).
//
// Consumer.Handle (or the function Handle) is the whole library for any broker or
// HTTP handler: one call, one transaction, with the modes Skip, Fail and
// ReturnStored and a content check. Package msgkey reads keys from CloudEvents, AMQP
// and HTTP messages. Inbox builds on it for this project's event envelopes: it
// decodes each AMQP delivery once, hands its payload, decoded into the type of the
// handlers registered for its event name (On, OnGroup), to those handlers, and can
// group commits. Rule 3 reads top to bottom in one function, processOne (the
// insert of the key, the handlers, the commit); group commit (WithGroupCommit,
// batch.go) is an option around that same rule.
//
// The table ships with the package (migrations/00001_processed_event.sql): a service
// lists Migrations in the schema its migrate applies.
//
// Package inboxtest holds the test suite a service runs against its schema.
package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
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
	"example.com/shop/platform/pg"
)

// Meta is what an event's envelope says besides its payload.
type Meta struct {
	EventID       uuid.UUID
	EventName     string
	OccurredAt    time.Time // UTC
	Producer      string
	CorrelationID string
}

// Event is one event as a GroupHandler receives it: its envelope's Meta and its
// payload decoded into T.
type Event[T any] struct {
	Meta
	Payload T
}

// Handler applies the effect of one event inside tx, the transaction that also holds
// the event's processed_event key; payload is the envelope's payload decoded into T
// by the inbox, once, before the transaction. It must do all its work through tx and
// must not commit or roll it back; an error rolls back the effect together with the
// key, so the event is processed again on its next delivery (wrap ErrPermanent when
// no retry can fix it). Handlers must not call the network (a broker, another
// service) inside tx.
type Handler[T any] func(ctx context.Context, tx pgx.Tx, meta Meta, payload T) error

// GroupHandler applies the effects of one or more new events of one event name in
// tx, the transaction that also holds their processed_event keys: events are in the
// order their deliveries reached the group, and none of them is a duplicate. It
// lets a handler write the effects of many events in a few set-based statements
// (one multi-row statement instead of one per event) where a Handler makes a round
// trip per statement and event. The rules of Handler apply: all work through tx, no
// commit or rollback, no network call.
//
// Its error decides what happens to the events (docs/architecture.md, rule 3):
//
//   - nil: every event's effect is written; they commit with their keys.
//   - an error made by EventFailed(n, err): event events[n] alone fails with err
//     (retried, or dead-lettered when err is permanent); the transaction is rolled
//     back and the other events are committed again without it.
//   - any other error: when events holds one event, that event fails with it; when
//     it holds several, the transaction is rolled back and each event is processed
//     again alone (a call with one event), so the error is attributed to the event
//     that causes it.
//
// A call with one event is also how an Inbox without group commit runs it.
type GroupHandler[T any] func(ctx context.Context, tx pgx.Tx, events []Event[T]) error

// Rounds splits the indexes 0..n-1 of a group's events into rounds in which no key
// (key(i): the row an event writes, an order id say) appears twice: the k-th event of
// a key goes to round k. A set-based GroupHandler writes one round per statement, so
// the events of one key apply in their order and a multi-row upsert never touches a
// row twice (PostgreSQL refuses that in one INSERT ... ON CONFLICT DO UPDATE).
func Rounds[K comparable](n int, key func(i int) K) [][]int {
	out := [][]int{make([]int, 0, n)}
	seen := make(map[K]int, n)
	for i := range n {
		k := seen[key(i)]
		seen[key(i)] = k + 1
		if k == len(out) {
			out = append(out, nil)
		}
		out[k] = append(out[k], i)
	}
	return out
}

// EventFailed returns the error a GroupHandler returns to fail events[n] alone with
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
	// ErrNoHandler means no handler is registered for the envelope's event_name.
	ErrNoHandler = errors.New("no handler registered for the event")
)

// Inbox runs the handlers of one consumer exactly once per event. Its key is the
// envelope's event_id in canonical lower-case text (msgkey.EventID), its content the
// envelope as contracts.Envelope encodes it (compact JSON, fields in the contract's
// order), so a copy of the event with the same event_id and another content is a
// conflict (dead-lettered), never applied, whatever whitespace or key order the copy
// was sent with. Register every handler (On, OnGroup) before the first call to
// Process or HandleDelivery; after that an Inbox is safe for concurrent use, and
// concurrent calls for the same event serialise on the processed_event primary key.
type Inbox struct {
	pool      *pgxpool.Pool
	consumer  *Consumer
	validator *contracts.Validator
	logger    *slog.Logger
	batch     *batcher // nil: one transaction per event
	tracer    trace.Tracer
	spanName  string        // "inbox <consumer>"
	timeout   time.Duration // bounds the database work of one delivery
	// publishers, when set, is who may publish what (WithPublishers).
	publishers *Publishers

	mu     sync.RWMutex
	routes map[string]*route
}

// event is one event inside the Inbox: decoded once, hashed once.
type event struct {
	meta    Meta
	payload any    // the route's payload type
	key     string // the event_id as text
	sum     []byte // SHA-256 of the content
}

// route is what runs for one event name: the decoding of its payload, its
// GroupHandler if any, then its Handlers in order. Every handler of one name takes
// the same payload type, so the payload is decoded once for all of them.
type route struct {
	payloadType reflect.Type
	decode      func(payload []byte) (any, error)
	handlers    []func(ctx context.Context, tx pgx.Tx, e *event) error
	group       func(ctx context.Context, tx pgx.Tx, events []*event) error
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
		pool: pool,
		// Its logger discards: a conflict is logged once, by the consumer
		// runtime that dead-letters it.
		consumer:  &Consumer{name: consumer, logger: slog.New(slog.DiscardHandler), metrics: newMetrics(reg, consumer, logger)},
		validator: v,
		logger:    logger.With("consumer", consumer),
		routes:    make(map[string]*route),
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

// On adds h to the handlers of eventName on ib: the inbox decodes the payload of
// each such event into T (encoding/json) once, before its transaction, and a
// payload that does not decode is a permanent failure (dead-lettered at once,
// nothing written). Handlers of one event run in the order they were registered,
// all in one transaction, after the event's GroupHandler if it has one. On panics
// on a nil h or a T other than the one eventName's handlers already take,
// programming errors.
func On[T any](ib *Inbox, eventName string, h Handler[T]) {
	if h == nil {
		panic("inbox: On with a nil handler for " + eventName)
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	r := routeOf[T](ib, eventName)
	r.handlers = append(r.handlers, func(ctx context.Context, tx pgx.Tx, e *event) error {
		return h(ctx, tx, e.meta, e.payload.(T))
	})
}

// Handles reports whether ib has a handler (On or OnGroup) for eventName.
func (ib *Inbox) Handles(eventName string) bool {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	r := ib.routes[eventName]
	return r != nil && (len(r.handlers) > 0 || r.group != nil)
}

// OnGroup makes h the first handler of eventName on ib: with group commit
// (WithGroupCommit) the new events of that name in one group are given to one call
// of h, otherwise each event to a call of its own; payloads are decoded as for On,
// and Handlers registered for the name afterwards run after h, for each event.
// OnGroup panics on a nil h or a name that has a handler already, programming
// errors.
func OnGroup[T any](ib *Inbox, eventName string, h GroupHandler[T]) {
	if h == nil {
		panic("inbox: OnGroup with a nil handler for " + eventName)
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if ib.routes[eventName] != nil {
		panic("inbox: OnGroup for " + eventName + ", which has a handler already")
	}
	routeOf[T](ib, eventName).group = func(ctx context.Context, tx pgx.Tx, events []*event) error {
		typed := make([]Event[T], len(events))
		for n, e := range events {
			typed[n] = Event[T]{Meta: e.meta, Payload: e.payload.(T)}
		}
		return h(ctx, tx, typed)
	}
}

// routeOf returns the route of eventName, made for payload type T if it has none.
// ib.mu is held.
func routeOf[T any](ib *Inbox, eventName string) *route {
	typ := reflect.TypeFor[T]()
	r := ib.routes[eventName]
	if r == nil {
		r = &route{payloadType: typ, decode: func(payload []byte) (any, error) {
			var p T
			err := json.Unmarshal(payload, &p)
			return p, err
		}}
		ib.routes[eventName] = r
	}
	if r.payloadType != typ {
		panic(fmt.Sprintf("inbox: a handler of %s takes %s, another %s", eventName, typ, r.payloadType))
	}
	return r
}

func (i *Inbox) routeFor(eventName string) *route {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.routes[eventName]
}

// ContentSum is the content hash the Inbox stores with env's key
// (processed_event.payload_sha256, 32 bytes): the SHA-256 of the envelope as
// contracts.Envelope encodes it, one canonical form whatever bytes a copy of
// the event travelled as (the relay sends PostgreSQL's jsonb text). A key
// whose stored hash differs is a *ConflictError (rule 3). It returns an error
// only when env does not encode.
func ContentSum(env contracts.Envelope) ([]byte, error) {
	// The bytes json.Marshal(env) gives, without its second pass: MarshalJSON's
	// output is already compact and HTML-escaped.
	b, err := env.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// Process handles env once for this consumer (docs/architecture.md, rule 3): it
// decodes env's payload into the type of the handlers of env.EventName, then, in
// one READ COMMITTED transaction, inserts the key (consumer, env.EventID) into
// processed_event; when the key already exists it commits nothing else and returns
// duplicate = true without running any handler. Otherwise it runs every handler
// registered for env.EventName in the same transaction and commits (Consumer.Handle
// states the content check).
//
// It returns ErrNoEventID or ErrNoHandler (wrapped), or an error wrapping
// ErrPermanent for a payload that does not decode, without touching the database;
// a *ConflictError when the event_id was processed with another content; and the
// handler's or the database's error (wrapped) when the transaction rolled back;
// the key is then gone with the effect and a later delivery processes env again.
//
// The transaction runs in a span "inbox <consumer>", and each handler in a span
// "handle <event name>" below it, children of the span in ctx (docs/architecture.md,
// "Tracing").
func (i *Inbox) Process(ctx context.Context, env contracts.Envelope) (duplicate bool, err error) {
	e, r, err := i.decode(env)
	if err != nil {
		return false, fmt.Errorf("inbox %s: %w", i.consumer.name, err)
	}
	ctx, span := i.startProcess(ctx, e)
	defer func() { endSpan(span, duplicate, err) }()
	if i.batch != nil {
		return i.batch.submit(ctx, e, r)
	}
	return i.processOne(ctx, e, r)
}

// decode makes the event of env: its payload decoded for its route, its key and
// its content hash.
func (i *Inbox) decode(env contracts.Envelope) (*event, *route, error) {
	if env.EventID == uuid.Nil {
		return nil, nil, fmt.Errorf("%s: %w", env.EventName, ErrNoEventID)
	}
	r := i.routeFor(env.EventName)
	if r == nil {
		return nil, nil, fmt.Errorf("event %s (%s): %w", env.EventID, env.EventName, ErrNoHandler)
	}
	payload, err := r.decode(env.Payload)
	if err != nil {
		return nil, nil, fmt.Errorf("event %s: decode %s payload: %w: %w", env.EventID, env.EventName, ErrPermanent, err)
	}
	sum, err := ContentSum(env)
	if err != nil {
		return nil, nil, fmt.Errorf("event %s: %w", env.EventID, err)
	}
	return &event{meta: metaOf(env), payload: payload, key: env.EventID.String(), sum: sum}, r, nil
}

// metaOf returns the Meta of env.
func metaOf(env contracts.Envelope) Meta {
	return Meta{EventID: env.EventID, EventName: env.EventName, OccurredAt: env.OccurredAt,
		Producer: env.Producer, CorrelationID: env.CorrelationID}
}

// processOne is docs/architecture.md, rule 3, for one event, top to bottom: in
// one transaction it inserts the event's key into processed_event; no row
// inserted means the event was processed before, and nothing else runs (a key
// stored with another content is a *ConflictError). Otherwise e's handlers
// run in the same transaction, which then commits. Only after processOne
// returned does the consumer runtime ack the delivery (HandleDelivery returns
// nil, and amqp.Consumer acks): a crash before the commit leaves neither key
// nor effect, so the redelivery applies the event.
//
// Group commit (WithGroupCommit) runs this rule for several events in one
// transaction, and comes back here for a group of one and for the members of
// a group that failed.
func (i *Inbox) processOne(ctx context.Context, e *event, r *route) (duplicate bool, err error) {
	c := i.consumer
	timer := prometheus.NewTimer(c.metrics.duration)
	err = pg.WithTx(ctx, i.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, insertKey, c.name, e.key, e.sum) // ... ON CONFLICT DO NOTHING
		if err != nil {
			return fmt.Errorf("record key: %w", err)
		}
		if tag.RowsAffected() == 0 {
			duplicate = true
			return i.sameContent(ctx, tx, e) // seen before: commit nothing else
		}
		if r.group != nil {
			err := i.runGroup(ctx, tx, []*event{e}, []trace.Span{trace.SpanFromContext(ctx)}, r)
			if err != nil {
				return err
			}
		}
		return i.runHandlers(ctx, tx, e, r)
	}) // COMMIT, or ROLLBACK on any error: the key goes with the effect
	timer.ObserveDuration()
	if err != nil {
		duplicate = false
	}
	c.count(Outcome{Duplicate: duplicate}, err)
	if err != nil {
		return false, fmt.Errorf("inbox %s: key %q: %w", c.name, e.key, err)
	}
	return duplicate, nil
}

// sameContent checks e against the key processed_event already holds for it:
// nil when the stored content hash is e's (or none was stored), a logged
// *ConflictError when it differs. The key's own statement, so READ COMMITTED
// sees a row committed while the insert waited; no row means the key was
// purged in between, an error the delivery's retry resolves.
func (i *Inbox) sameContent(ctx context.Context, tx pgx.Tx, e *event) error {
	stored, _, err := PostgresStore{}.ReadKey(ctx, tx, i.consumer.name, e.key)
	if err != nil {
		return fmt.Errorf("read key: %w", err)
	}
	if stored != nil && !bytes.Equal(stored, e.sum) {
		return i.consumer.conflict(ctx, e.key, stored, e.sum)
	}
	return nil
}

// runGroup runs r's GroupHandler over events in tx, each event in a span "handle
// <event name>" that covers the call, below the event's inbox span in parents. The
// error of an EventFailed for the only event is returned as the plain error.
func (i *Inbox) runGroup(ctx context.Context, tx pgx.Tx, events []*event, parents []trace.Span, r *route) error {
	name := events[0].meta.EventName
	spans := make([]trace.Span, len(events))
	hctx := ctx
	for n := range events {
		var sctx context.Context
		sctx, spans[n] = i.tracer.Start(trace.ContextWithSpan(ctx, parents[n]), "handle "+name)
		if n == 0 {
			hctx = sctx
		}
	}
	err := r.group(hctx, tx, events)
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
	if errors.As(err, &ef) && (ef.index < 0 || ef.index >= len(events)) {
		return fmt.Errorf("handler of %s: EventFailed(%d) for a group of %d: %w", name, ef.index, len(events), ef.err)
	}
	if len(events) == 1 && ef != nil {
		err = ef.err
	}
	return fmt.Errorf("handler of %s: %w", name, err)
}

// runHandlers runs every Handler of e's route in tx, stopping at the first error.
func (i *Inbox) runHandlers(ctx context.Context, tx pgx.Tx, e *event, r *route) error {
	for n, h := range r.handlers {
		if err := i.runHandler(ctx, tx, e, h); err != nil {
			return fmt.Errorf("handler %d of %s: %w", n+1, e.meta.EventName, err)
		}
	}
	return nil
}

// eventLogger returns the Inbox's logger with the event's id and correlation id.
func (i *Inbox) eventLogger(m Meta) *slog.Logger {
	return logging.WithEvent(i.logger, m.EventID.String(), m.CorrelationID)
}

type metrics struct {
	processed  prometheus.Counter
	duplicates prometheus.Counter
	conflicts  prometheus.Counter
	failed     prometheus.Counter
	invalid    prometheus.Counter
	// unauthenticated counts deliveries Publishers.Check refused.
	unauthenticated prometheus.Counter
	duration        prometheus.Observer
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
		Help: `Messages not processed, per consumer and reason: "invalid" (no key, undecodable or unhandled, dead-lettered at once), "unauthenticated" (not from its producer's relay through app.events, dead-lettered at once) or "error" (rolled back, retried).`,
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
		processed:       processed.WithLabelValues(consumer),
		duplicates:      duplicates.WithLabelValues(consumer),
		conflicts:       conflicts.WithLabelValues(consumer),
		failed:          failures.WithLabelValues(consumer, "error"),
		invalid:         failures.WithLabelValues(consumer, "invalid"),
		unauthenticated: failures.WithLabelValues(consumer, "unauthenticated"),
		duration:        duration.WithLabelValues(consumer),
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
