package auditor

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/store"
)

// Config tunes the continuous audit.
type Config struct {
	// Interval is the time between two audit cycles (AUDIT_INTERVAL).
	Interval time.Duration
	// Grace is how long after its publication an event may still be on its way (in
	// flight or in a retry queue) before a consumer without its key counts it as
	// unaccounted, and how long after its last change a placed order may wait for its
	// answer before it counts as unanswered (AUDIT_GRACE). Choose it above the longest
	// retry delay.
	Grace time.Duration
	// Window is how far back each cycle re-checks events already audited, so a key
	// that disappears after the audit first saw it is still found (AUDIT_WINDOW).
	Window time.Duration
	// PageSize is the number of outbox rows one query reads (default 500).
	PageSize int
	// PagesPerCycle bounds the pages each pass reads in one cycle (default 20), so a
	// large backlog is caught up over several cycles instead of in one burst.
	PagesPerCycle int
	// QueueDepths, when set, reads the ready messages of dead-letter queues (the
	// probe's passive declare); each cycle then compares them with the open dead
	// letters to flag copies that are gone. A failed read leaves that flag unknown.
	QueueDepths func(ctx context.Context, queues ...string) (map[string]int, error)
}

// Finding is a published event that a consumer neither processed nor dead-lettered
// within the grace period.
type Finding struct {
	EventID     uuid.UUID `json:"event_id"`
	EventName   string    `json:"event_name"`
	Producer    string    `json:"producer"`
	OrderID     uuid.UUID `json:"order_id"`
	PublishedAt time.Time `json:"published_at"`
	Consumers   []string  `json:"consumers"`
	FirstSeen   time.Time `json:"first_seen"`

	// dead holds the consumers with an open dead letter of the event.
	dead []DeadLetterFinding
}

// DeadLetterFinding is a published event a consumer dead-lettered and nobody has
// replayed or dropped yet: not delivered, awaiting a decision (docs/operations.md,
// "Dead letters").
type DeadLetterFinding struct {
	EventID        uuid.UUID `json:"event_id"`
	EventName      string    `json:"event_name"`
	Producer       string    `json:"producer"`
	OrderID        uuid.UUID `json:"order_id"`
	Consumer       string    `json:"consumer"`
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	Reason         string    `json:"reason"`
	Attempts       int       `json:"attempts"`
}

// UnansweredFinding is an order left placed with no answer: still placed (no
// confirmed, rejected or cancelled since) more than Grace after its last change,
// whatever its outbox still holds. Answer tells which leg stopped.
type UnansweredFinding struct {
	OrderID uuid.UUID `json:"order_id"`
	// EventID is the event that asks for the answer (EventName, at Version), absent
	// when its outbox row is gone (purged); PublishedAt is when the relay published
	// it, absent when it is gone or unpublished.
	EventID     *uuid.UUID `json:"event_id,omitempty"`
	EventName   string     `json:"event_name"`
	Version     int        `json:"version"`
	PublishedAt *time.Time `json:"published_at,omitempty"`
	// Since is the order's last change (its updated_at: when it was placed), and
	// FirstSeen when it became unanswered: Since plus Grace.
	Since     time.Time `json:"since"`
	FirstSeen time.Time `json:"first_seen"`
	// Answer is the answer found in its producer's outbox: the order did not apply it
	// (look at its delivery to the order's consumer). Nil when no answer was written:
	// the request's consumer did not answer (look at the request's delivery).
	Answer *Answer `json:"answer,omitempty"`
}

// Answer is an answering event in its producer's outbox.
type Answer struct {
	Producer    string     `json:"producer"`
	EventID     uuid.UUID  `json:"event_id"`
	EventName   string     `json:"event_name"`
	PublishedAt *time.Time `json:"published_at"`
}

// ProducerProgress is the audit's progress through one producer's outbox.
type ProducerProgress struct {
	// Audited counts the producer's published events the forward pass has checked.
	Audited int64 `json:"audited"`
	// LagSeconds is the age of the producer's oldest event not checked yet (0: none).
	LagSeconds float64 `json:"lag_seconds"`
}

// Report is the audit's state after its last cycle.
type Report struct {
	// Unaccounted counts, per consumer, the events it misses now.
	Unaccounted map[string]int `json:"unaccounted"`
	// UnaccountedTotal is the number of distinct events some consumer misses.
	UnaccountedTotal int `json:"unaccounted_total"`
	// Events lists the findings, oldest event first (at most 100).
	Events []Finding `json:"events"`
	// DeadLettered counts, per consumer, the published events it dead-lettered that
	// await a decision: not delivered, and not unaccounted either.
	DeadLettered map[string]int `json:"dead_lettered"`
	// DeadLetteredTotal is the number of those (event, consumer) pairs.
	DeadLetteredTotal int `json:"dead_lettered_total"`
	// DeadLetters lists them, oldest dead letter first (at most 100).
	DeadLetters []DeadLetterFinding `json:"dead_letters"`
	// DeadLetterCopiesMissing counts, per consumer, the open dead letters that have
	// no copy in its dead-letter queue, at least: open dead letters (of every message,
	// published event or not) minus the messages in the queue, when positive. They are
	// replayed from their record. A consumer is absent when its queue could not be read.
	DeadLetterCopiesMissing map[string]int `json:"dead_letter_copies_missing"`
	// DeadLetteredUnknown counts, per consumer, its open dead letters of messages no
	// producer's outbox holds (see [UnknownDeadLetter]); apart from DeadLettered.
	DeadLetteredUnknown map[string]int `json:"dead_lettered_unknown"`
	// UnknownDeadLetters lists them, oldest dead letter first (at most 100).
	UnknownDeadLetters []UnknownDeadLetter `json:"unknown_dead_letters"`
	// Unanswered counts the orders left placed with no answer longer than Grace (up to
	// 1000).
	Unanswered int `json:"unanswered"`
	// UnansweredOrders lists them, oldest last change first (at most 100).
	UnansweredOrders []UnansweredFinding `json:"unanswered_orders"`
	// Contradictions counts the orders whose status contradicts their producer's
	// answer (see [ContradictionFinding]).
	Contradictions int `json:"contradictions"`
	// ContradictedOrders lists them, oldest answer first (at most 100).
	ContradictedOrders []ContradictionFinding `json:"contradicted_orders"`
	// Audited counts the published events of every producer the forward pass has
	// checked since start.
	Audited int64 `json:"audited"`
	// LagSeconds is the age of the oldest outbox event, of any producer, the audit has
	// not checked yet (0 when it has checked them all).
	LagSeconds float64 `json:"lag_seconds"`
	// Producers holds the progress per producer of contracts.Producers.
	Producers map[string]ProducerProgress `json:"producers"`
	// Cycles counts completed cycles; LastCycleAt is when the last one ended.
	Cycles      int64     `json:"cycles"`
	LastCycleAt time.Time `json:"last_cycle_at"`
	// LastError is the error of the last cycle, empty when it succeeded.
	LastError string `json:"last_error,omitempty"`
}

// maxRecheckFindings bounds the findings older than the window re-read in one cycle.
const maxRecheckFindings = 1000

// Audit checks, again and again, that every event every producer published
// (contracts.Producers) reached every consumer that should receive it
// (contracts.ConsumersOf; docs/architecture.md, rule 3: its key). An event a consumer
// dead-lettered is not delivered: until someone replays or drops it, the audit counts
// it apart from the unaccounted ones, as dead-lettered, awaiting a decision; an open
// dead letter of a message in no outbox is counted too, apart (see
// [UnknownDeadLetter]). It flags the orders left placed with no answer (see
// [UnansweredFinding]): the reply leg's end to end check, whichever hop stopped,
// read again from the order database every cycle. It flags the answers an order
// contradicts (see [ContradictionFinding]) among the events the passes check.
//
// Each cycle makes, in each producer's outbox, three bounded passes, walking its UUID
// v7 primary key:
//   - forward: from the producer's cursor, pages of events that occurred and were
//     published more than Grace ago; it stops at the first event that is not, so an
//     event the relay publishes late is checked once it is;
//   - window: the events of the last Window behind the cursor, again, one part per
//     cycle, so a key deleted after the first check is found;
//   - every finding, re-read by id until accounted for; one whose outbox row is gone
//     (purged) is forgotten.
//
// Each cursor starts at its outbox's first row: a fresh auditor audits everything the
// outboxes still hold, PagesPerCycle pages per producer and cycle. The unanswered
// orders and the dead letters of unknown messages keep no state between cycles: a
// restart changes neither. An event whose
// transaction commits after the cursor has passed its id and after the window has
// passed it too (a transaction open longer than Window) is not audited.
//
// Audit is safe for concurrent use: Run writes, Report reads.
type Audit struct {
	st     *store.Store
	cfg    Config
	logger *slog.Logger
	now    func() time.Time

	metrics

	mu        sync.Mutex
	positions map[string]*position // by producer name
	findings  map[uuid.UUID]*Finding
	// contradictions are keyed by the answer's event id.
	contradictions map[uuid.UUID]*ContradictionFinding
	waiting        []UnansweredFinding
	unknown        map[string][]UnknownDeadLetter // by consumer
	report         Report
}

// position is the audit's place in one producer's outbox.
type position struct {
	cursor  uuid.UUID // last id the forward pass checked
	recheck uuid.UUID // last id the window pass checked
	audited int64
	lag     float64
}

// metrics are the audit's Prometheus metrics (New lists them).
type metrics struct {
	unaccounted  *prometheus.GaugeVec
	dead         *prometheus.GaugeVec
	deadAge      *prometheus.GaugeVec
	copiesGone   *prometheus.GaugeVec
	unknownDead  *prometheus.GaugeVec
	unanswered   prometheus.Gauge
	contradicted prometheus.Gauge
	lag          *prometheus.GaugeVec
	audited      *prometheus.CounterVec
	failures     prometheus.Counter
	duration     prometheus.Histogram
}

// New returns an Audit on st, registering on reg delivery_unaccounted_events{consumer},
// delivery_dead_lettered_events{consumer}, delivery_dead_letter_oldest_seconds{consumer},
// delivery_dead_letter_copies_missing{consumer},
// delivery_dead_lettered_unknown_messages{consumer}, delivery_unanswered_orders,
// delivery_contradicted_orders, delivery_audit_lag_seconds{producer}, delivery_audited_events_total{producer},
// delivery_audit_failures_total and delivery_audit_cycle_seconds. Zero PageSize and
// PagesPerCycle take their defaults.
func New(st *store.Store, cfg Config, reg prometheus.Registerer, logger *slog.Logger) (*Audit, error) {
	if cfg.PageSize <= 0 {
		cfg.PageSize = 500
	}
	if cfg.PagesPerCycle <= 0 {
		cfg.PagesPerCycle = 20
	}
	if cfg.Interval <= 0 || cfg.Grace <= 0 || cfg.Window <= 0 {
		return nil, fmt.Errorf("audit: interval, grace and window must be positive")
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	a := &Audit{
		st: st, cfg: cfg, logger: logger, now: time.Now, metrics: m,
		positions:      map[string]*position{},
		findings:       map[uuid.UUID]*Finding{},
		contradictions: map[uuid.UUID]*ContradictionFinding{},
		unknown:        map[string][]UnknownDeadLetter{},
	}
	a.report.Unaccounted, a.report.DeadLettered, a.report.DeadLetterCopiesMissing = map[string]int{}, map[string]int{}, map[string]int{}
	a.report.DeadLetteredUnknown = map[string]int{}
	a.report.Events, a.report.DeadLetters, a.report.UnansweredOrders = []Finding{}, []DeadLetterFinding{}, []UnansweredFinding{}
	a.report.UnknownDeadLetters, a.report.ContradictedOrders = []UnknownDeadLetter{}, []ContradictionFinding{}
	a.report.Producers = map[string]ProducerProgress{}
	for _, c := range contracts.Consumers() {
		a.unaccounted.WithLabelValues(c.Name).Set(0)
		a.dead.WithLabelValues(c.Name).Set(0)
		a.deadAge.WithLabelValues(c.Name).Set(0)
		a.unknownDead.WithLabelValues(c.Name).Set(0)
		a.report.Unaccounted[c.Name] = 0
		a.report.DeadLettered[c.Name] = 0
		a.report.DeadLetteredUnknown[c.Name] = 0
	}
	for _, p := range contracts.Producers() {
		a.positions[p.Name] = &position{}
		a.lag.WithLabelValues(p.Name).Set(0)
		a.audited.WithLabelValues(p.Name).Add(0)
		a.report.Producers[p.Name] = ProducerProgress{}
	}
	return a, nil
}

// newMetrics returns the audit's metrics, registered on reg.
func newMetrics(reg prometheus.Registerer) (metrics, error) {
	m := metrics{
		unaccounted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "delivery_unaccounted_events",
			Help: "Published events older than AUDIT_GRACE that the consumer has neither processed nor dead-lettered.",
		}, []string{"consumer"}),
		dead: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "delivery_dead_lettered_events",
			Help: "Messages the consumer dead-lettered that nobody has replayed or dropped yet, awaiting a decision: published events (not delivered) and messages in no outbox (delivery_dead_lettered_unknown_messages).",
		}, []string{"consumer"}),
		deadAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "delivery_dead_letter_oldest_seconds",
			Help: "Age in seconds of the consumer's oldest dead letter that awaits a decision, of a published event or of a message in no outbox (0 when none).",
		}, []string{"consumer"}),
		copiesGone: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "delivery_dead_letter_copies_missing",
			Help: "Open dead letters of the consumer without a copy in its dead-letter queue, at least (open dead letters minus queue depth); replayed from their record.",
		}, []string{"consumer"}),
		unknownDead: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "delivery_dead_lettered_unknown_messages",
			Help: "Open dead letters of the consumer whose message no producer's outbox holds (forged, published by hand, or purged from its outbox); awaiting a decision (counted among the oldest 1000 open ones).",
		}, []string{"consumer"}),
		unanswered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "delivery_unanswered_orders",
			Help: "Orders still placed, with no answer applied, more than AUDIT_GRACE after their last change (counted up to 1000).",
		}),
		contradicted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "delivery_contradicted_orders",
			Help: "Orders whose status contradicts the answer in its producer's outbox (confirmed there, rejected here, or the reverse): an answer the producer never gave was applied.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "delivery_audit_lag_seconds",
			Help: "Age in seconds of the oldest event of the producer's outbox the audit has not checked yet (0 when none).",
		}, []string{"producer"}),
		audited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delivery_audited_events_total",
			Help: "Published events of the producer checked by the audit's forward pass.",
		}, []string{"producer"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "delivery_audit_failures_total",
			Help: "Audit cycles that failed (a database did not answer); the next cycle resumes where it stopped.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "delivery_audit_cycle_seconds",
			Help:    "Time one audit cycle takes, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
	}
	for _, c := range []prometheus.Collector{m.unaccounted, m.dead, m.deadAge, m.copiesGone, m.unknownDead, m.unanswered, m.contradicted, m.lag, m.audited, m.failures, m.duration} {
		if err := reg.Register(c); err != nil {
			return metrics{}, fmt.Errorf("audit metrics: %w", err)
		}
	}
	return m, nil
}

// Run runs a cycle at once and then every Interval until ctx ends; it returns nil
// then. A failed cycle is logged and counted; the next one resumes from the cursors.
func (a *Audit) Run(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	for {
		if err := a.Cycle(ctx); err != nil && ctx.Err() == nil {
			a.failures.Inc()
			a.logger.WarnContext(ctx, "audit cycle failed", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Cycle runs the three passes over every producer's outbox once and updates the
// metrics and the report.
func (a *Audit) Cycle(ctx context.Context) error {
	now := a.now()
	err := a.cycle(ctx, now)
	a.duration.Observe(a.now().Sub(now).Seconds())
	a.mu.Lock()
	defer a.mu.Unlock()
	a.report.Cycles++
	a.report.LastCycleAt = now
	a.report.LastError = ""
	if err != nil {
		a.report.LastError = err.Error()
	}
	a.publishLocked(now)
	return err
}

func (a *Audit) cycle(ctx context.Context, now time.Time) error {
	for _, p := range contracts.Producers() {
		if err := a.producerCycle(ctx, p.Name, now); err != nil {
			return fmt.Errorf("%s outbox: %w", p.Name, err)
		}
	}
	waiting, err := a.readUnanswered(ctx, now)
	if err != nil {
		return err
	}
	unknown, err := a.unknownDeadLetters(ctx)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.logNew(ctx, waiting, unknown)
	a.waiting, a.unknown = waiting, unknown
	a.mu.Unlock()
	return a.copies(ctx)
}

// producerCycle runs the three passes over producer's outbox (forward, window,
// findings), then sets its lag: how long the oldest event past the forward pass's
// cursor has waited.
func (a *Audit) producerCycle(ctx context.Context, producer string, now time.Time) error {
	settled := now.Add(-a.cfg.Grace)
	a.mu.Lock()
	pos := a.positions[producer]
	cursor, recheck := pos.cursor, pos.recheck
	a.mu.Unlock()

	cursor, err := a.forwardPass(ctx, producer, pos, cursor, settled, now)
	if err != nil {
		return err
	}
	if err := a.windowPass(ctx, producer, pos, recheck, cursor, settled, now); err != nil {
		return err
	}
	if err := a.findingsPass(ctx, producer, now); err != nil {
		return err
	}
	lag := 0.0
	at, ok, err := a.st.FirstAfter(ctx, producer, cursor)
	if err != nil {
		return err
	}
	if ok {
		lag = max(now.Sub(at).Seconds(), 0)
	}
	a.lag.WithLabelValues(producer).Set(lag)
	a.mu.Lock()
	pos.lag = lag
	a.mu.Unlock()
	return nil
}

// forwardPass checks the events published before settled that follow cursor, at
// most PagesPerCycle pages, in id order, stopping at the first one that is not yet
// settled; it moves pos's cursor past what it checked and returns the new cursor.
func (a *Audit) forwardPass(ctx context.Context, producer string, pos *position, cursor uuid.UUID, settled, now time.Time) (uuid.UUID, error) {
	for range a.cfg.PagesPerCycle {
		rows, err := a.st.OutboxPage(ctx, producer, cursor, maxID(settled), a.cfg.PageSize)
		if err != nil {
			return cursor, err
		}
		n := 0
		for _, r := range rows {
			if r.PublishedAt == nil || r.PublishedAt.After(settled) {
				break
			}
			n++
		}
		if n > 0 {
			if err := a.check(ctx, rows[:n], now); err != nil {
				return cursor, err
			}
			cursor = rows[n-1].ID
			a.mu.Lock()
			pos.cursor = cursor
			pos.audited += int64(n)
			a.mu.Unlock()
			a.audited.WithLabelValues(producer).Add(float64(n))
		}
		if n < len(rows) || len(rows) < a.cfg.PageSize {
			break
		}
	}
	return cursor, nil
}

// windowPass checks again the settled events of the last Window behind cursor,
// PagesPerCycle pages a cycle from where the previous cycle stopped (recheck),
// wrapping to the window's start once it reaches cursor.
func (a *Audit) windowPass(ctx context.Context, producer string, pos *position, recheck, cursor uuid.UUID, settled, now time.Time) error {
	start := minID(now.Add(-a.cfg.Window))
	if compare(recheck, start) < 0 || compare(recheck, cursor) >= 0 {
		recheck = start
	}
	for range a.cfg.PagesPerCycle {
		rows, err := a.st.OutboxPage(ctx, producer, recheck, cursor, a.cfg.PageSize)
		if err != nil {
			return err
		}
		var ready []store.OutboxRow
		for _, r := range rows {
			if r.PublishedAt != nil && !r.PublishedAt.After(settled) {
				ready = append(ready, r)
			}
		}
		if err := a.check(ctx, ready, now); err != nil {
			return err
		}
		if len(rows) < a.cfg.PageSize {
			recheck = start // the whole window is done: start again next cycle
			break
		}
		recheck = rows[len(rows)-1].ID
	}
	a.mu.Lock()
	pos.recheck = recheck
	a.mu.Unlock()
	return nil
}

// findingsPass checks every finding of producer (delivery or contradiction) again by
// id (at most maxRecheckFindings): those older than the window are checked nowhere
// else, and one whose outbox row was purged is forgotten, wherever it lies.
func (a *Audit) findingsPass(ctx context.Context, producer string, now time.Time) error {
	a.mu.Lock()
	var old []uuid.UUID
	for id, f := range a.findings {
		if f.Producer == producer && len(old) < maxRecheckFindings {
			old = append(old, id)
		}
	}
	for id, c := range a.contradictions {
		if c.Producer == producer && len(old) < maxRecheckFindings && a.findings[id] == nil {
			old = append(old, id)
		}
	}
	a.mu.Unlock()
	if len(old) == 0 {
		return nil
	}
	rows, err := a.st.OutboxByIDs(ctx, producer, old)
	if err != nil {
		return err
	}
	if err := a.check(ctx, rows, now); err != nil {
		return err
	}
	a.forgetMissing(old, rows)
	return nil
}

// copies flags open dead letters whose copy is gone from the dead-letter queue: per
// consumer, open dead letters minus the queue's messages, when positive (a lower
// bound: the queue may also hold stale copies). Without QueueDepths, or when the
// broker does not answer, the flag is left out (unknown), never zero.
func (a *Audit) copies(ctx context.Context) error {
	if a.cfg.QueueDepths == nil {
		return nil
	}
	missing := map[string]int{}
	for _, c := range contracts.Consumers() {
		open, ok, err := a.st.UnresolvedDeadLetters(ctx, c.Name)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		depths, err := a.cfg.QueueDepths(ctx, c.DeadLetterQueue)
		depth, read := depths[c.DeadLetterQueue]
		if err != nil || !read {
			a.logger.DebugContext(ctx, "dead-letter queue not read", slog.String("queue", c.DeadLetterQueue), slog.Any("error", err))
			continue
		}
		missing[c.Name] = max(open-depth, 0)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range contracts.Consumers() {
		n, ok := missing[c.Name]
		if !ok {
			a.copiesGone.DeleteLabelValues(c.Name)
			continue
		}
		a.copiesGone.WithLabelValues(c.Name).Set(float64(n))
		if n > 0 && a.report.DeadLetterCopiesMissing[c.Name] == 0 {
			a.logger.WarnContext(ctx, "open dead letters without a copy in the dead-letter queue; replay them from the record",
				slog.String("consumer", c.Name), slog.Int("missing", n))
		}
	}
	a.report.DeadLetterCopiesMissing = missing
	return nil
}

// check classifies the rows' deliveries and records or clears their findings.
func (a *Audit) check(ctx context.Context, rows []store.OutboxRow, now time.Time) error {
	if len(rows) == 0 {
		return nil
	}
	ds, err := deliveries(ctx, a.st, rows, now, a.cfg.Grace)
	if err != nil {
		return err
	}
	if err := a.checkAnswers(ctx, rows, now); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range rows {
		var missing []string
		var dead []DeadLetterFinding
		for _, d := range ds[r.ID] {
			switch d.State {
			case StateMissing:
				missing = append(missing, d.Consumer)
			case StateDeadLettered:
				dead = append(dead, DeadLetterFinding{EventID: r.ID, EventName: r.EventName, Producer: r.Producer, OrderID: r.OrderID,
					Consumer: d.Consumer, DeadLetteredAt: d.DeadLetter.DeadLetteredAt, Reason: d.DeadLetter.Reason,
					Attempts: d.DeadLetter.Attempts})
			}
		}
		if len(missing) == 0 && len(dead) == 0 {
			delete(a.findings, r.ID)
			continue
		}
		f := a.findings[r.ID]
		if f == nil {
			f = &Finding{EventID: r.ID, EventName: r.EventName, Producer: r.Producer, OrderID: r.OrderID, PublishedAt: *r.PublishedAt, FirstSeen: now}
			a.findings[r.ID] = f
		}
		if len(missing) > 0 && len(f.Consumers) == 0 {
			a.logger.WarnContext(ctx, "unaccounted event", slog.String("event_id", r.ID.String()),
				slog.String("event_name", r.EventName), slog.Any("consumers", missing))
		}
		if len(dead) > 0 && len(f.dead) == 0 {
			a.logger.WarnContext(ctx, "dead-lettered event awaiting a decision", slog.String("event_id", r.ID.String()),
				slog.String("event_name", r.EventName), slog.String("consumer", dead[0].Consumer), slog.String("reason", dead[0].Reason))
		}
		f.Consumers, f.dead = missing, dead
	}
	return nil
}

// logNew logs the unanswered orders and the unknown dead letters the last cycle did
// not report (a restarted auditor logs them all once again). The caller holds a.mu.
func (a *Audit) logNew(ctx context.Context, waiting []UnansweredFinding, unknown map[string][]UnknownDeadLetter) {
	seen := map[uuid.UUID]bool{}
	for _, u := range a.waiting {
		seen[u.OrderID] = true
	}
	for _, u := range waiting {
		if !seen[u.OrderID] {
			a.logger.WarnContext(ctx, "order without an answer", slog.String("order_id", u.OrderID.String()),
				slog.Int("version", u.Version), slog.Time("since", u.Since))
		}
	}
	for c, list := range unknown {
		keys := map[string]bool{}
		for _, d := range a.unknown[c] {
			keys[d.MessageKey] = true
		}
		for _, d := range list {
			if !keys[d.MessageKey] {
				a.logger.WarnContext(ctx, "dead letter of a message in no outbox, awaiting a decision", slog.String("consumer", c),
					slog.String("message_key", d.MessageKey), slog.String("event_name", d.EventName), slog.String("reason", d.Reason))
			}
		}
	}
}

// forgetMissing drops the findings among ids whose outbox row is gone (purged).
func (a *Audit) forgetMissing(ids []uuid.UUID, rows []store.OutboxRow) {
	seen := make(map[uuid.UUID]bool, len(rows))
	for _, r := range rows {
		seen[r.ID] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		if !seen[id] {
			delete(a.findings, id)
			delete(a.contradictions, id)
		}
	}
}

// publishLocked sets the gauges and the report from the findings.
func (a *Audit) publishLocked(now time.Time) {
	counts, deadCounts, oldest := map[string]int{}, map[string]int{}, map[string]float64{}
	for _, c := range contracts.Consumers() {
		counts[c.Name], deadCounts[c.Name], oldest[c.Name] = 0, 0, 0
	}
	events := make([]Finding, 0, len(a.findings))
	dead := []DeadLetterFinding{}
	for _, f := range a.findings {
		for _, c := range f.Consumers {
			counts[c]++
		}
		if len(f.Consumers) > 0 {
			events = append(events, *f)
		}
		for _, d := range f.dead {
			deadCounts[d.Consumer]++
			oldest[d.Consumer] = max(oldest[d.Consumer], now.Sub(d.DeadLetteredAt).Seconds())
			dead = append(dead, d)
		}
	}
	slices.SortFunc(events, func(x, y Finding) int { return compare(x.EventID, y.EventID) })
	slices.SortFunc(dead, func(x, y DeadLetterFinding) int { return x.DeadLetteredAt.Compare(y.DeadLetteredAt) })
	for c, n := range counts {
		a.unaccounted.WithLabelValues(c).Set(float64(n))
	}
	unknownCounts := map[string]int{}
	var unknown []UnknownDeadLetter
	for c := range deadCounts {
		for _, d := range a.unknown[c] {
			oldest[c] = max(oldest[c], now.Sub(d.DeadLetteredAt).Seconds())
		}
		unknownCounts[c] = len(a.unknown[c])
		unknown = append(unknown, a.unknown[c]...)
		a.dead.WithLabelValues(c).Set(float64(deadCounts[c] + unknownCounts[c]))
		a.unknownDead.WithLabelValues(c).Set(float64(unknownCounts[c]))
		a.deadAge.WithLabelValues(c).Set(oldest[c])
	}
	slices.SortFunc(unknown, func(x, y UnknownDeadLetter) int { return x.DeadLetteredAt.Compare(y.DeadLetteredAt) })
	a.report.DeadLetteredUnknown = unknownCounts
	a.report.UnknownDeadLetters = append([]UnknownDeadLetter{}, unknown[:min(len(unknown), 100)]...)
	a.report.Unaccounted = counts
	a.report.UnaccountedTotal = len(events)
	a.report.Events = events[:min(len(events), 100)]
	a.report.DeadLettered = deadCounts
	a.report.DeadLetteredTotal = len(dead)
	a.report.DeadLetters = dead[:min(len(dead), 100)]

	a.unanswered.Set(float64(len(a.waiting)))
	a.report.Unanswered = len(a.waiting)
	a.report.UnansweredOrders = append([]UnansweredFinding{}, a.waiting[:min(len(a.waiting), 100)]...)

	contradicted := make([]ContradictionFinding, 0, len(a.contradictions))
	for _, c := range a.contradictions {
		contradicted = append(contradicted, *c)
	}
	slices.SortFunc(contradicted, func(x, y ContradictionFinding) int { return compare(x.EventID, y.EventID) })
	a.contradicted.Set(float64(len(contradicted)))
	a.report.Contradictions = len(contradicted)
	a.report.ContradictedOrders = contradicted[:min(len(contradicted), 100)]

	a.report.Audited, a.report.LagSeconds = 0, 0
	a.report.Producers = make(map[string]ProducerProgress, len(a.positions))
	for name, pos := range a.positions {
		a.report.Producers[name] = ProducerProgress{Audited: pos.audited, LagSeconds: pos.lag}
		a.report.Audited += pos.audited
		a.report.LagSeconds = max(a.report.LagSeconds, pos.lag)
	}
}

// Report returns a copy of the audit's state after its last cycle.
func (a *Audit) Report() Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.report
	r.Unaccounted = maps.Clone(a.report.Unaccounted)
	r.Events = slices.Clone(a.report.Events)
	r.DeadLettered = maps.Clone(a.report.DeadLettered)
	r.DeadLetters = slices.Clone(a.report.DeadLetters)
	r.DeadLetterCopiesMissing = maps.Clone(a.report.DeadLetterCopiesMissing)
	r.UnansweredOrders = slices.Clone(a.report.UnansweredOrders)
	r.DeadLetteredUnknown = maps.Clone(a.report.DeadLetteredUnknown)
	r.UnknownDeadLetters = slices.Clone(a.report.UnknownDeadLetters)
	r.ContradictedOrders = slices.Clone(a.report.ContradictedOrders)
	r.Producers = maps.Clone(a.report.Producers)
	return r
}

// Cursors returns, per producer, the id of the last event the forward pass checked.
func (a *Audit) Cursors() map[string]uuid.UUID {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]uuid.UUID, len(a.positions))
	for name, pos := range a.positions {
		out[name] = pos.cursor
	}
	return out
}

// Grace returns the configured grace period.
func (a *Audit) Grace() time.Duration { return a.cfg.Grace }

func compare(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) }
