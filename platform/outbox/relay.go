package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"example.com/shop/platform/amqp"
	"example.com/shop/platform/backoff"
)

// Defaults applied by NewRelay to zero RelayConfig fields.
const (
	DefaultPartitions     = 1
	DefaultBatchSize      = 500
	DefaultPollInterval   = time.Second
	DefaultConfirmTimeout = 5 * time.Second
	DefaultLockRetry      = time.Second
	DefaultLockTimeout    = 5 * time.Second
	DefaultLockKeepalive  = time.Second
	DefaultMaxBackoff     = 10 * time.Second
	DefaultStallTimeout   = 15 * time.Second
	DefaultStatsInterval  = 5 * time.Second
	// DefaultLockKey is the advisory lock id the relays of one database
	// agree on when RelayConfig.LockKey is 0.
	DefaultLockKey int64 = 0x6f7574626f78 // "outbox"
	// MaxPartitions bounds RelayConfig.Partitions.
	MaxPartitions = 1024
)

// finishTimeout bounds the database work of a batch that is left once its
// publishing is over (marking and commit), and any single query.
const finishTimeout = 10 * time.Second

// stopTimeout bounds the database work left when the relay stops (marking
// a confirmed prefix, the commit, closing the lock session), however the
// database behaves: what it cannot mark in time is rolled back and
// published again later (duplicates, never a loss).
const stopTimeout = 3 * time.Second

// maxErrorLen caps the last_error text stored on a row, in bytes.
const maxErrorLen = 1000

// RelayConfig tunes a Relay. The zero value gives the defaults.
type RelayConfig struct {
	// Partitions is the number of partitions the outbox is split into
	// (default 1): a row belongs to partition key_hash % Partitions, so all
	// events of one aggregate share a partition. Each partition is led by one
	// relay at a time and published in order on its own; the relays of one
	// database share the partitions. Every relay of a database must use the
	// same value: a relay that finds relays with another value running
	// stands by until they are gone, or their lock sessions are (a frozen
	// one's ends after LockTimeout), and then publishes nothing while a
	// batch of theirs is still open (docs/operations.md, "Changing
	// RELAY_PARTITIONS"). At most MaxPartitions. An option around rule 2,
	// not a change of it: each partition runs the same transaction
	// (batchTx.run) on its own rows.
	Partitions int
	// BatchSize is the largest number of rows of one partition read,
	// published and marked in one transaction (default 500).
	BatchSize int
	// PollInterval is how long an idle partition waits for a NOTIFY before
	// it looks at the outbox anyway, and the first wait after a failed batch
	// (default 1 s).
	PollInterval time.Duration
	// MaxBackoff caps the wait between attempts after failed batches: it
	// starts at PollInterval and doubles, with jitter, up to MaxBackoff
	// (default 10 s).
	MaxBackoff time.Duration
	// StallTimeout is how long a led partition may fail to publish (every
	// batch failing, or one batch still publishing) before Ready reports it
	// (default 15 s).
	StallTimeout time.Duration
	// ConfirmTimeout bounds the publishing of one batch, from opening a
	// channel to the last confirm (default 5 s); no message of a batch is
	// sent after it. It also bounds how long the batch's transaction stays
	// open while the relay talks to the broker.
	ConfirmTimeout time.Duration
	// LockKey is the base of the PostgreSQL advisory lock ids the relays of
	// one database agree on (0 means DefaultLockKey); see lockKeys.
	LockKey int64
	// LockRetry is how often a relay looks at who leads which partition:
	// a standby tries to join, a member takes free partitions and gives
	// some back when it leads more than its share; a relay that lost its
	// lock session waits this long before it joins again (default 1 s).
	LockRetry time.Duration
	// LockTimeout is the idle_session_timeout of the relay's lock session
	// (PostgreSQL 14 or later): a relay that stops talking to the database
	// for this long (frozen, partitioned) loses its session and so its
	// partitions, which the other relays take about LockRetry later. It also
	// bounds each query on that session, and sets its TCP keepalives
	// (default 5 s).
	LockTimeout time.Duration
	// LockKeepalive is how often the relay talks to its lock session at the
	// least, which keeps it from idling out; at most half of LockTimeout
	// (default 1 s).
	LockKeepalive time.Duration
	// StatsInterval is how often the backlog gauges are refreshed (default
	// 5 s).
	StatsInterval time.Duration
}

func (c RelayConfig) withDefaults() (RelayConfig, error) {
	var errs []error
	positive := func(name string, v *time.Duration, def time.Duration) {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			errs = append(errs, fmt.Errorf("relay config: %s is %v, must be positive", name, *v))
		}
	}
	switch {
	case c.Partitions == 0:
		c.Partitions = DefaultPartitions
	case c.Partitions < 0 || c.Partitions > MaxPartitions:
		errs = append(errs, fmt.Errorf("relay config: Partitions is %d, must be between 1 and %d", c.Partitions, MaxPartitions))
	}
	switch {
	case c.BatchSize == 0:
		c.BatchSize = DefaultBatchSize
	case c.BatchSize < 0:
		errs = append(errs, fmt.Errorf("relay config: BatchSize is %d, must be positive", c.BatchSize))
	}
	positive("PollInterval", &c.PollInterval, DefaultPollInterval)
	positive("ConfirmTimeout", &c.ConfirmTimeout, DefaultConfirmTimeout)
	positive("LockRetry", &c.LockRetry, DefaultLockRetry)
	positive("LockTimeout", &c.LockTimeout, DefaultLockTimeout)
	positive("LockKeepalive", &c.LockKeepalive, DefaultLockKeepalive)
	positive("MaxBackoff", &c.MaxBackoff, DefaultMaxBackoff)
	positive("StallTimeout", &c.StallTimeout, DefaultStallTimeout)
	if c.LockKeepalive > 0 && c.LockTimeout > 0 && 2*c.LockKeepalive > c.LockTimeout {
		errs = append(errs, fmt.Errorf("relay config: LockKeepalive %v must be at most half of LockTimeout %v", c.LockKeepalive, c.LockTimeout))
	}
	positive("StatsInterval", &c.StatsInterval, DefaultStatsInterval)
	if c.LockKey == 0 {
		c.LockKey = DefaultLockKey
	}
	return c, errors.Join(errs...)
}

// Publisher is what the relay publishes through: AMQPPublisher, one per
// partition led, so partitions publish in parallel on channels of their
// own. Stream opens a publishing session with amqp.Publisher.Stream's
// contract (sends in order without waiting, confirms reported in order, no
// message sent after timeout, the first failure ends it); Exchange names
// the exchange it publishes to, which names the relay's send spans.
type Publisher interface {
	Stream(ctx context.Context, timeout time.Duration) Stream
	Exchange() string
	Close() error
}

// Stream is one publishing session of a Publisher: amqp.Stream's Send, Wait
// and Close. Wait returns the confirmed prefix of every message sent so far
// and the error that ended it; a Wait that returns fewer than n with no
// error ends the relay's transaction there, as a failure would, without
// counting one.
type Stream interface {
	Send(msgs []amqp.Message)
	Wait(n int) (confirmed int, err error)
	Close()
}

// AMQPPublisher is the Publisher of an amqp.Publisher.
func AMQPPublisher(p *amqp.Publisher) Publisher { return amqpPublisher{p} }

type amqpPublisher struct{ *amqp.Publisher }

func (p amqpPublisher) Stream(ctx context.Context, timeout time.Duration) Stream {
	return p.Publisher.Stream(ctx, timeout)
}

// Relay publishes the outbox rows of one database to the broker
// (docs/architecture.md, flow step 3 and rule 2). Run it in its own
// process (bin/order relay); start as many as you like: they share the
// partitions.
//
// Guarantees:
//   - At least once, never a loss: a row is marked published only after the
//     broker confirmed its message (acked and not returned). A crash or a
//     failure between the confirm and the commit leaves the row unmarked,
//     and it is published again: consumers see a duplicate, never a gap.
//   - Never a ghost: only committed rows are visible to the relay.
//   - Order per aggregate: the rows of one partition go out in
//     (occurred_at, id) order, and all rows of one aggregate key are in one
//     partition. The first message of a batch that fails (nack, return,
//     timeout, lost channel or connection) stops that partition's batch: the
//     prefix before it is marked, and everything from it on is retried, in
//     order. Other partitions go on.
//   - A failure is recorded: the failing row gets attempts+1 and last_error
//     (the broker's reason, or why the broker is unreachable when the
//     publish only timed out), in the batch's transaction or, when that one
//     has expired, in a short transaction of its own. The first failure of a
//     streak, and each change of reason, is logged at WARN, the return to
//     normal at INFO; every failed batch counts in
//     relay_publish_failures_total, and Ready reports a partition that has
//     not published for StallTimeout.
//   - No duplicate storm: after a failed batch the partition sends only the
//     failing row, waiting PollInterval doubled up to MaxBackoff (with
//     jitter) between attempts, until the broker confirms it; then full
//     batches resume.
//   - One leader per partition: a session-level advisory lock per
//     partition, held on the relay's lock session, which the relay talks to
//     every LockKeepalive and the server ends after LockTimeout of silence
//     (idle_session_timeout). With R relays alive each leads about
//     Partitions/R partitions; a relay leading more than its share gives
//     some back, and a dead or frozen relay's partitions are taken about
//     LockRetry after its session ends.
//   - Order across a change of leader: each batch's transaction takes the
//     partition's batch lock (pg_try_advisory_xact_lock) and checks that the
//     relay's lock session still leads the partition; a new leader publishes
//     nothing while a former leader's batch transaction is open. That
//     transaction outlives the batch's publishing deadline (ConfirmTimeout)
//     by 20 s (idle_in_transaction_session_timeout), and no message is sent
//     after that deadline, so a frozen leader that wakes up sends nothing
//     the new leader could overtake. After a change of Partitions, each
//     batch also checks that no batch of another count is open (the fence
//     locks), so the same holds across the change.
//   - Bounded transactions: a batch's transaction lives for at most
//     ConfirmTimeout plus a few seconds of database work; the server ends it
//     too if the process hangs.
//
// Latency: the relay waits for NOTIFY on NotifyChannel (sent by the outbox
// insert trigger) and wakes every partition it leads; each also polls every
// PollInterval as a fallback; full batches are followed by the next one at
// once.
//
// A Relay is used by one Run at a time; Leader and Ready may be called
// concurrently.
type Relay struct {
	pool         *pgxpool.Pool
	newPublisher func() Publisher
	cfg          RelayConfig
	keys         lockKeys
	logger       *slog.Logger
	m            *relayMetrics
	brokerReady  func() error

	tracer trace.Tracer // starts the send spans (docs/architecture.md, "Tracing")

	leading atomic.Int32 // partitions led now

	mu    sync.Mutex
	parts map[int]*partition // led partitions, for Ready
}

// RelayOption configures a Relay beyond its RelayConfig.
type RelayOption func(*Relay)

// WithBrokerStatus gives the relay a way to ask why the broker cannot be
// reached, such as amqp.Connection.Ready. When a publish fails only by
// timing out, its error is recorded on the row together with that reason
// ("connection refused", a blocked connection), not just as a deadline.
func WithBrokerStatus(ready func() error) RelayOption {
	return func(r *Relay) { r.brokerReady = ready }
}

// WithTracerProvider makes the relay start its send spans with tp instead of
// the global tracer provider (telemetry.Setup installs that one).
func WithTracerProvider(tp trace.TracerProvider) RelayOption {
	return func(r *Relay) { r.tracer = tp.Tracer(tracerName) }
}

// NewRelay returns a Relay that reads the outbox table through pool and
// publishes with publishers made by newPublisher (one per partition led,
// closed when it stops leading), which must publish to the events
// exchange. The relay opens its lock and LISTEN session with pool's
// connection settings but outside the pool. Metrics are registered on reg
// (see newRelayMetrics for the names); a nil logger discards logs. It
// returns an error for a bad setting or when the metrics cannot be
// registered (for example registered twice on one registry).
func NewRelay(pool *pgxpool.Pool, newPublisher func() Publisher, cfg RelayConfig, logger *slog.Logger, reg prometheus.Registerer, opts ...RelayOption) (*Relay, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newRelayMetrics(reg, cfg.Partitions)
	if err != nil {
		return nil, err
	}
	r := &Relay{
		pool:         pool,
		newPublisher: newPublisher,
		cfg:          cfg,
		keys:         newLockKeys(cfg.LockKey, cfg.Partitions),
		logger:       logger.With(slog.String("component", "outbox-relay")),
		m:            m,
		parts:        map[int]*partition{},
		tracer:       otel.Tracer(tracerName),
	}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// Leader reports whether this relay leads at least one partition now (the
// relay_leader gauge). A relay leading none is healthy: it stands by.
func (r *Relay) Leader() bool { return r.leading.Load() > 0 }

// Partitions returns the numbers of the partitions this relay leads now,
// in increasing order.
func (r *Relay) Partitions() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int, 0, len(r.parts))
	for p := range r.cfg.Partitions {
		if _, ok := r.parts[p]; ok {
			out = append(out, p)
		}
	}
	return out
}

// Ready returns nil unless a partition this relay leads cannot publish:
// every batch has failed for longer than StallTimeout (the error names the
// partition and the last failure), or one batch has been publishing for
// longer than StallTimeout (a broker that blocks publishers, say). A relay
// that leads nothing is ready. It is meant for /readyz; it never blocks.
func (r *Relay) Ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	var errs []error
	for n := range r.cfg.Partitions {
		p, ok := r.parts[n]
		if !ok {
			continue
		}
		if err := p.stalled(now, r.cfg.StallTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Run joins the relays of the database, leads its share of the partitions
// and publishes them until ctx ends. When its lock session fails it stops
// every partition, waits LockRetry and joins again. Database and broker
// failures are logged, counted and retried; they never end Run.
//
// When ctx ends, the batches in hand stop publishing, their confirmed
// prefixes are marked and committed (or, if that fails, everything is
// rolled back and published again later), and Run returns nil. Nothing that
// was not confirmed is ever marked.
func (r *Relay) Run(ctx context.Context) error {
	r.logger.InfoContext(ctx, "outbox relay starting",
		slog.Int("partitions", r.cfg.Partitions), slog.Int("batch_size", r.cfg.BatchSize),
		slog.Int64("lock_key", r.cfg.LockKey), slog.Duration("lock_timeout", r.cfg.LockTimeout))
	var wg sync.WaitGroup
	statsCtx, stopStats := context.WithCancel(ctx)
	wg.Go(func() { r.refreshStats(statsCtx) })
	defer func() { stopStats(); wg.Wait() }()

	for {
		conn, err := r.join(ctx)
		if err != nil {
			return nil // ctx ended
		}
		err = r.coordinate(ctx, conn)
		if ctx.Err() != nil {
			r.logger.InfoContext(ctx, "outbox relay stopped")
			return nil
		}
		r.logger.WarnContext(ctx, "outbox relay lost its lock session, standing by", slog.Any("error", err))
		// Wait one LockRetry before joining again, so that relays whose
		// sessions are healthy take the partitions first.
		if backoff.Sleep(ctx, r.cfg.LockRetry) != nil {
			return nil
		}
	}
}

// explain adds the broker's own account to a publish that failed without
// saying why (a timeout, a closed channel): the connection's error, such as
// "connection refused" or a blocked connection, when WithBrokerStatus
// gave the relay one and it reports the broker unavailable.
func (r *Relay) explain(err error) error {
	if r.brokerReady == nil {
		return err
	}
	if !errors.Is(err, amqp.ErrConfirmTimeout) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, amqp091.ErrClosed) {
		return err
	}
	if why := r.brokerReady(); why != nil {
		return fmt.Errorf("broker unavailable (%v): %w", why, err)
	}
	return err
}

// errorText is err's message cut to maxErrorLen bytes, for last_error.
func errorText(err error) string {
	msg := err.Error()
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen]
	}
	return msg
}

// refreshStats keeps the backlog gauges current until ctx ends. Every relay
// reports them, leading or not, so an alert sees the backlog even when no
// relay leads.
func (r *Relay) refreshStats(ctx context.Context) {
	n := r.cfg.Partitions
	for {
		qctx, cancel := context.WithTimeout(ctx, finishTimeout)
		counts := make([]int64, n)
		ages := make([]float64, n)
		err := func() error {
			// An unnamed statement, planned for each run: a plan cached while the
			// outbox was small would stay as it grows (batchSettingsSQL).
			rows, err := r.pool.Query(qctx, `SELECT key_hash % $1, count(*),
				COALESCE(EXTRACT(EPOCH FROM now() - min(occurred_at)), 0)::float8
				FROM outbox WHERE published_at IS NULL GROUP BY 1`, pgx.QueryExecModeExec, n)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var p int
				var c int64
				var age float64
				if err := rows.Scan(&p, &c, &age); err != nil {
					return err
				}
				if p >= 0 && p < n {
					counts[p], ages[p] = c, max(age, 0)
				}
			}
			return rows.Err()
		}()
		cancel()
		switch {
		case err == nil:
			var total int64
			var oldest float64
			for p := range n {
				label := strconv.Itoa(p)
				r.m.partUnpublished.WithLabelValues(label).Set(float64(counts[p]))
				r.m.partOldestAge.WithLabelValues(label).Set(ages[p])
				total += counts[p]
				oldest = max(oldest, ages[p])
			}
			r.m.unpublished.Set(float64(total))
			r.m.oldestAge.Set(oldest)
		case ctx.Err() == nil:
			r.logger.WarnContext(ctx, "outbox relay: backlog query failed", slog.Any("error", err))
		}
		if backoff.Sleep(ctx, r.cfg.StatsInterval) != nil {
			return
		}
	}
}
