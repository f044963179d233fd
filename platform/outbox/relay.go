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
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/amqp"
	"example.com/shop/platform/backoff"
	"example.com/shop/platform/pg"
)

// Mode chooses how the relay waits for the broker's publisher confirms.
type Mode int

const (
	// Pipelined publishes a whole batch, then waits for its confirms in
	// order (amqp.Publisher.PublishBatch). It is the default.
	Pipelined Mode = iota
	// OneAtATime publishes one message and waits for its confirm before the
	// next (amqp.Publisher.PublishOne): the slow baseline, kept for
	// comparison in benchmarks.
	OneAtATime
)

// String returns the name ParseMode accepts: "pipelined" or "one-at-a-time".
func (m Mode) String() string {
	switch m {
	case Pipelined:
		return "pipelined"
	case OneAtATime:
		return "one-at-a-time"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode parses "pipelined" or "one-at-a-time"; any other value is an
// error naming the accepted ones.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "pipelined":
		return Pipelined, nil
	case "one-at-a-time":
		return OneAtATime, nil
	}
	return 0, fmt.Errorf("relay mode %q: want pipelined or one-at-a-time", s)
}

// Defaults applied by NewRelay to zero RelayConfig fields.
const (
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
)

// finishTimeout bounds the database work of a batch that is left once its
// publishing is over (marking and commit), and any single query.
const finishTimeout = 10 * time.Second

// maxErrorLen caps the last_error text stored on a row, in bytes.
const maxErrorLen = 1000

// RelayConfig tunes a Relay. The zero value gives the defaults.
type RelayConfig struct {
	// BatchSize is the largest number of rows read, published and marked in
	// one transaction (default 500).
	BatchSize int
	// PollInterval is how long an idle leader waits for a NOTIFY before it
	// looks at the outbox anyway, and the first wait after a failed batch
	// (default 1 s).
	PollInterval time.Duration
	// MaxBackoff caps the wait between attempts after failed batches: it
	// starts at PollInterval and doubles, with jitter, up to MaxBackoff
	// (default 10 s).
	MaxBackoff time.Duration
	// StallTimeout is how long a leader may fail to publish (every batch
	// failing, or one batch still publishing) before Ready reports it
	// (default 15 s).
	StallTimeout time.Duration
	// ConfirmTimeout bounds the publishing of one batch, from opening a
	// channel to the last confirm (default 5 s). It also bounds how long the
	// batch's transaction stays open while the relay talks to the broker.
	ConfirmTimeout time.Duration
	// Mode is Pipelined (the default) or OneAtATime.
	Mode Mode
	// LockKey is the id of the PostgreSQL advisory lock that elects the one
	// active relay of a database (0 means DefaultLockKey).
	LockKey int64
	// LockRetry is how often a standby relay tries to take the lock, and how
	// long a relay that lost the lock waits before it contends again
	// (default 1 s).
	LockRetry time.Duration
	// LockTimeout is the idle_session_timeout of the leader's lock session
	// (PostgreSQL 14 or later): a leader that stops talking to the database
	// for this long (frozen, partitioned) loses its session and so its lock,
	// and a standby takes over about LockRetry later. It also bounds the
	// leader's keepalive ping, and sets the session's TCP keepalives
	// (default 5 s).
	LockTimeout time.Duration
	// LockKeepalive is how often the leader pings its lock session, which
	// keeps it from idling out; at most half of LockTimeout (default 1 s).
	LockKeepalive time.Duration
	// StatsInterval is how often the relay_unpublished_rows and
	// relay_oldest_unpublished_age_seconds gauges are refreshed (default 5 s).
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
	if c.Mode != Pipelined && c.Mode != OneAtATime {
		errs = append(errs, fmt.Errorf("relay config: unknown %v", c.Mode))
	}
	if c.LockKey == 0 {
		c.LockKey = DefaultLockKey
	}
	return c, errors.Join(errs...)
}

// Relay publishes the outbox rows of one database to the broker
// (docs/architecture.md, flow step 3). Run it in its own process
// (bin/order relay); start as many as you like, one leads and the others
// stand by.
//
// Guarantees:
//   - At least once, never a loss: a row is marked published only after the
//     broker confirmed its message (acked and not returned). A crash or a
//     failure between the confirm and the commit leaves the row unmarked,
//     and it is published again: consumers see a duplicate, never a gap.
//   - Never a ghost: only committed rows are visible to the relay.
//   - Order: rows go out in (occurred_at, id) order. The first message of a
//     batch that fails (nack, return, timeout, lost channel or connection)
//     stops the batch: the prefix before it is marked, and everything from
//     it on is retried, in order.
//   - A failure is recorded: the failing row gets attempts+1 and last_error
//     (the broker's reason, or why the broker is unreachable when the
//     publish only timed out), in the batch's transaction or, when that one
//     has expired, in a short transaction of its own. The first failure of a
//     streak, and each change of reason, is logged at WARN, the return to
//     normal at INFO; every failed batch counts in
//     relay_publish_failures_total, and Ready reports a leader that has not
//     published for StallTimeout.
//   - No duplicate storm: after a failed batch the relay sends only the
//     failing row, waiting PollInterval doubled up to MaxBackoff (with
//     jitter) between attempts, until the broker confirms it; then full
//     batches resume. Queues that accepted the rest of the failed batch
//     receive it once more, not once per attempt.
//   - One active relay: a session-level advisory lock (LockKey) held on a
//     dedicated connection, which the leader pings every LockKeepalive and
//     the server ends after LockTimeout of silence (idle_session_timeout):
//     a leader that freezes or loses the database loses the lock, and a
//     standby takes over within about LockTimeout + LockRetry. Before
//     publishing each batch the leader checks, in the batch's transaction,
//     that its lock session still holds the lock, so a leader that wakes up
//     after losing it steps down without publishing. A leader never
//     publishes rows after an older row that another transaction (a former
//     leader's batch) still holds: it waits for that transaction to end.
//   - Bounded transactions: a batch's transaction lives for at most
//     ConfirmTimeout plus a few seconds of database work; the server ends it
//     too (idle_in_transaction_session_timeout) if the process hangs.
//
// Latency: a leader waits for NOTIFY on NotifyChannel (sent by the outbox
// insert trigger) and polls every PollInterval as a fallback; full batches
// are followed by the next one at once.
//
// A Relay is used by one Run at a time; Leader and Ready may be called
// concurrently.
type Relay struct {
	pool        *pgxpool.Pool
	pub         *amqp.Publisher
	cfg         RelayConfig
	logger      *slog.Logger
	m           *relayMetrics
	leader      atomic.Bool
	brokerReady func() error

	busySince atomic.Int64 // start of the batch being published (Unix ns), 0 when none

	mu           sync.Mutex
	failingSince time.Time // first failed batch of the current streak, zero when none
	lastFailure  error

	// Test hooks, nil in production: called before publishing a batch of n
	// messages, and after publishing with the confirmed count, before the
	// rows are marked.
	beforePublish func(n int)
	afterPublish  func(confirmed int)
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

// NewRelay returns a Relay that reads the outbox table through pool and
// publishes with pub, which must publish to the events exchange. The relay
// takes its lock and LISTEN connection with pool's connection settings but
// outside the pool. Metrics are registered on reg (see newRelayMetrics for
// the names); a nil logger discards logs. It returns an error for a
// negative setting or when the metrics cannot be registered (for example
// registered twice on one registry).
func NewRelay(pool *pgxpool.Pool, pub *amqp.Publisher, cfg RelayConfig, logger *slog.Logger, reg prometheus.Registerer, opts ...RelayOption) (*Relay, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newRelayMetrics(reg)
	if err != nil {
		return nil, err
	}
	r := &Relay{
		pool:   pool,
		pub:    pub,
		cfg:    cfg,
		logger: logger.With(slog.String("component", "outbox-relay")),
		m:      m,
	}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// Leader reports whether this relay currently holds the lock and publishes
// (the relay_leader gauge). A standby relay is healthy: it reports false.
func (r *Relay) Leader() bool { return r.leader.Load() }

// Ready returns nil unless this relay leads and cannot publish: every batch
// has failed for longer than StallTimeout (the error names the last
// failure), or one batch has been publishing for longer than StallTimeout
// (a broker that blocks publishers, say). A standby is ready. It is meant
// for /readyz; it never blocks.
func (r *Relay) Ready() error {
	if !r.leader.Load() {
		return nil
	}
	now := time.Now()
	if b := r.busySince.Load(); b != 0 {
		if d := now.Sub(time.Unix(0, b)); d > r.cfg.StallTimeout {
			return fmt.Errorf("outbox relay: one batch has been publishing for %v", d.Round(time.Second))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.failingSince.IsZero() {
		if d := now.Sub(r.failingSince); d > r.cfg.StallTimeout {
			return fmt.Errorf("outbox relay cannot publish for %v: %w", d.Round(time.Second), r.lastFailure)
		}
	}
	return nil
}

// Run stands by until it holds the advisory lock, then publishes until ctx
// ends or leadership is lost, in which case it stands by again. Database
// and broker failures are logged, counted and retried; they never end Run.
//
// When ctx ends, the batch in hand stops publishing, its confirmed prefix is
// marked and committed (or, if that fails, everything is rolled back and
// published again later), and Run returns nil. Nothing that was not
// confirmed is ever marked.
func (r *Relay) Run(ctx context.Context) error {
	r.logger.InfoContext(ctx, "outbox relay starting",
		slog.String("mode", r.cfg.Mode.String()), slog.Int("batch_size", r.cfg.BatchSize),
		slog.Int64("lock_key", r.cfg.LockKey), slog.Duration("lock_timeout", r.cfg.LockTimeout))
	var wg sync.WaitGroup
	statsCtx, stopStats := context.WithCancel(ctx)
	wg.Go(func() { r.refreshStats(statsCtx) })
	defer func() { stopStats(); wg.Wait() }()

	for {
		conn, err := r.standBy(ctx)
		if err != nil {
			return nil // ctx ended
		}
		err = r.lead(ctx, conn)
		if ctx.Err() != nil {
			r.logger.InfoContext(ctx, "outbox relay stopped")
			return nil
		}
		r.logger.WarnContext(ctx, "outbox relay lost leadership, standing by", slog.Any("error", err))
		// Wait one LockRetry before contending again, so that a standby whose
		// session is healthy takes over rather than the relay that just lost
		// its lock connection.
		if backoff.Sleep(ctx, r.cfg.LockRetry) != nil {
			return nil
		}
	}
}

// standBy returns a dedicated connection that holds the advisory lock,
// trying every LockRetry, with the session guarded by guardLockSession. It
// returns an error only when ctx ends.
func (r *Relay) standBy(ctx context.Context) (*pgx.Conn, error) {
	var conn *pgx.Conn
	announced := false
	for {
		if conn == nil {
			c, err := pgx.ConnectConfig(ctx, r.pool.Config().ConnConfig.Copy())
			if err != nil && ctx.Err() == nil {
				r.logger.WarnContext(ctx, "outbox relay: lock connection failed", slog.Any("error", err))
			}
			conn = c
		}
		if conn != nil {
			qctx, cancel := context.WithTimeout(ctx, finishTimeout)
			var got bool
			err := conn.QueryRow(qctx, "SELECT pg_try_advisory_lock($1)", r.cfg.LockKey).Scan(&got)
			if err == nil && got {
				err = r.guardLockSession(qctx, conn)
			}
			cancel()
			switch {
			case err == nil && got:
				r.logger.InfoContext(ctx, "outbox relay is the leader")
				return conn, nil
			case err == nil:
				if !announced {
					r.logger.InfoContext(ctx, "outbox relay standing by: another relay holds the lock")
					announced = true
				}
			case ctx.Err() == nil:
				r.logger.WarnContext(ctx, "outbox relay: lock query failed", slog.Any("error", err))
				fallthrough
			default:
				// Closing the session releases a lock it may have taken.
				_ = conn.Close(context.WithoutCancel(ctx))
				conn = nil
			}
		}
		if err := backoff.Sleep(ctx, r.cfg.LockRetry); err != nil {
			if conn != nil {
				_ = conn.Close(context.WithoutCancel(ctx))
			}
			return nil, err
		}
	}
}

// guardLockSession makes the server end the lock session, and with it the
// lock, when the leader stops talking for LockTimeout: idle_session_timeout
// (PostgreSQL 14 or later; an older server gets a warning and relies on the
// TCP keepalives alone), and TCP keepalives that give up on a silent peer
// after about LockTimeout.
func (r *Relay) guardLockSession(ctx context.Context, conn *pgx.Conn) error {
	secs := strconv.Itoa(max(1, int(r.cfg.LockTimeout/time.Second)/3))
	if _, err := conn.Exec(ctx, `SELECT set_config('tcp_keepalives_idle', $1, false),
		set_config('tcp_keepalives_interval', $1, false), set_config('tcp_keepalives_count', '3', false)`, secs); err != nil {
		return fmt.Errorf("set lock session keepalives: %w", err)
	}
	_, err := conn.Exec(ctx, `SELECT set_config('idle_session_timeout', $1, false)`,
		strconv.FormatInt(r.cfg.LockTimeout.Milliseconds(), 10))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42704" { // undefined_object: before PostgreSQL 14
		r.logger.WarnContext(ctx, "outbox relay: this PostgreSQL has no idle_session_timeout; a frozen leader keeps its lock until TCP keepalives end its session")
		return nil
	}
	if err != nil {
		return fmt.Errorf("set lock session idle_session_timeout: %w", err)
	}
	return nil
}

// errLockLost ends leadership when the batch's transaction finds that the
// lock session no longer holds the lock.
var errLockLost = errors.New("the lock session no longer holds the advisory lock")

// lead publishes while conn (holding the lock) stays alive and ctx lasts.
// It returns why leadership ended, always closing conn, which ends the
// session and so releases the lock and the LISTEN.
func (r *Relay) lead(ctx context.Context, conn *pgx.Conn) error {
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{NotifyChannel}.Sanitize()); err != nil {
		return fmt.Errorf("listen %s: %w", NotifyChannel, err)
	}
	lockPID := conn.PgConn().PID()
	leaderCtx, lose := context.WithCancelCause(ctx)
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() { r.watch(leaderCtx, conn, wake, lose) })
	defer func() { lose(nil); wg.Wait() }()

	r.leader.Store(true)
	r.m.leader.Set(1)
	defer func() {
		r.leader.Store(false)
		r.m.leader.Set(0)
		r.mu.Lock()
		r.failingSince, r.lastFailure = time.Time{}, nil
		r.mu.Unlock()
	}()

	// Retry for as long as it leads; after a failed publish, send only the failing row.
	bo := backoff.New(r.cfg.PollInterval, r.cfg.MaxBackoff)
	single := false
	for {
		limit := r.cfg.BatchSize
		if single {
			limit = 1
		}
		n, pubFailed, err := r.publishBatch(leaderCtx, lockPID, limit)
		if leaderCtx.Err() != nil {
			return context.Cause(leaderCtx)
		}
		if errors.Is(err, errLockLost) {
			lose(err)
			return err
		}
		var wait <-chan struct{} = wake
		delay := r.cfg.PollInterval
		if err != nil {
			r.noteFailure(ctx, err, limit)
			single = single || pubFailed
			wait = nil // back off, however busy the outbox is
			delay = bo.NextBackOff()
		} else {
			r.noteSuccess(ctx)
			single = false
			bo.Reset()
			if n == limit {
				continue
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-wait:
		case <-t.C:
		case <-leaderCtx.Done():
		}
		t.Stop()
	}
}

// noteFailure remembers a failed batch for Ready and logs it: at WARN when
// a streak of failures starts or its reason changes, at DEBUG otherwise.
func (r *Relay) noteFailure(ctx context.Context, err error, limit int) {
	r.mu.Lock()
	first := r.failingSince.IsZero()
	if first {
		r.failingSince = time.Now()
	}
	changed := !first && failureReason(err) != failureReason(r.lastFailure)
	r.lastFailure = err
	since := r.failingSince
	r.mu.Unlock()
	switch {
	case first:
		r.logger.WarnContext(ctx, "outbox relay cannot publish; retrying the first unpublished row alone, with backoff",
			slog.Any("error", err))
	case changed:
		r.logger.WarnContext(ctx, "outbox relay still cannot publish, for another reason",
			slog.Any("error", err), slog.Duration("failing_for", time.Since(since).Round(time.Millisecond)))
	default:
		r.logger.DebugContext(ctx, "outbox relay batch failed again", slog.Any("error", err), slog.Int("batch_limit", limit))
	}
}

// noteSuccess ends a streak of failures, logging how long it lasted.
func (r *Relay) noteSuccess(ctx context.Context) {
	r.mu.Lock()
	since := r.failingSince
	r.failingSince, r.lastFailure = time.Time{}, nil
	r.mu.Unlock()
	if !since.IsZero() {
		r.logger.InfoContext(ctx, "outbox relay publishes again", slog.Duration("failed_for", time.Since(since).Round(time.Millisecond)))
	}
}

// failureReason is the part of a batch error that says why, without the
// message id and batch index that change from one attempt to the next.
func failureReason(err error) string {
	if err == nil {
		return ""
	}
	var pe *amqp.PublishError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// watch waits for notifications on conn and forwards them to wake, and
// pings conn every LockKeepalive, so that the server never finds the lock
// session idle for LockTimeout while the leader lives. When conn fails, or
// a ping gets no answer within LockTimeout, it ends leadership through
// lose.
func (r *Relay) watch(ctx context.Context, conn *pgx.Conn, wake chan<- struct{}, lose context.CancelCauseFunc) {
	lastPing := time.Now()
	for {
		wctx, cancel := context.WithTimeout(ctx, max(0, r.cfg.LockKeepalive-time.Since(lastPing)))
		_, err := conn.WaitForNotification(wctx)
		idle := wctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		if err == nil && time.Since(lastPing) < r.cfg.LockKeepalive {
			continue
		}
		if err == nil || idle && !conn.IsClosed() {
			pctx, cancel := context.WithTimeout(ctx, r.cfg.LockTimeout)
			err = conn.Ping(pctx)
			cancel()
			lastPing = time.Now()
			if err == nil || ctx.Err() != nil {
				continue
			}
		}
		lose(fmt.Errorf("lock connection lost: %w", err))
		return
	}
}

// publishBatch runs one cycle in one transaction: check that lockPID still
// holds the lock, select up to limit rows, publish them, mark the confirmed
// prefix, record the first failure, commit. It returns the number of rows
// selected, whether publishing failed (as opposed to the database), and the
// batch's error, if any; errLockLost when the lock is gone.
func (r *Relay) publishBatch(ctx context.Context, lockPID uint32, limit int) (int, bool, error) {
	// Database work outlives ctx so that a confirmed prefix is still marked
	// on shutdown, but it is bounded.
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ConfirmTimeout+2*finishTimeout)
	defer cancel()

	var n, marked int
	var pubErr error
	var failedID string
	err := pg.WithTx(txCtx, r.pool, func(tx pgx.Tx) error {
		rows, err := r.selectBatch(ctx, tx, lockPID, limit)
		if err != nil {
			return err
		}
		n = len(rows)
		if n == 0 {
			return nil
		}
		r.m.batchSize.Observe(float64(n))
		if r.beforePublish != nil {
			r.beforePublish(n)
		}
		r.busySince.Store(time.Now().UnixNano())
		confirmed, err := r.publish(ctx, rows)
		r.busySince.Store(0)
		if r.afterPublish != nil {
			r.afterPublish(confirmed)
		}

		b := &pgx.Batch{}
		if confirmed > 0 {
			ids := make([]string, confirmed)
			for i := range ids {
				ids[i] = rows[i].MessageID
			}
			b.Queue(`UPDATE outbox SET published_at = now() WHERE id = ANY($1::uuid[])`, ids)
		}
		if err != nil && ctx.Err() == nil {
			// A broker failure, not our shutdown: count it on the row that
			// stopped the batch.
			pubErr = r.explain(err)
			failedID = rows[confirmed].MessageID
			b.Queue(recordFailureSQL, failedID, errorText(pubErr))
		}
		if b.Len() > 0 {
			if err := tx.SendBatch(txCtx, b).Close(); err != nil {
				return fmt.Errorf("mark %d published rows: %w", confirmed, err)
			}
		}
		marked = confirmed
		return nil
	})
	if pubErr != nil {
		r.m.failures.Inc()
		if err != nil {
			// The batch's transaction is gone (it expired while the broker
			// kept us waiting, say): record the failure on its own.
			if rerr := r.recordFailure(ctx, failedID, pubErr); rerr != nil {
				r.logger.WarnContext(ctx, "outbox relay: could not record a failed publish", slog.String("event_id", failedID),
					slog.Any("error", rerr), slog.Any("publish_error", pubErr))
			}
			return n, true, fmt.Errorf("outbox relay batch: %w (and the batch's transaction failed: %v)", pubErr, err)
		}
		r.m.published.Add(float64(marked))
		return n, true, fmt.Errorf("outbox relay batch: %w", pubErr)
	}
	if err != nil {
		if ctx.Err() != nil {
			return n, false, nil // shutdown or leadership lost: not a failure
		}
		if errors.Is(err, errLockLost) {
			return n, false, err
		}
		return n, false, fmt.Errorf("outbox relay batch: %w", err)
	}
	r.m.published.Add(float64(marked))
	return n, false, nil
}

// recordFailureSQL counts a failed publish on its row.
const recordFailureSQL = `UPDATE outbox SET attempts = attempts + 1, last_error = $2
	WHERE id = $1::uuid AND published_at IS NULL`

// recordFailure counts a failed publish on row id in a short transaction
// of its own, bounded by finishTimeout even when ctx has ended.
func (r *Relay) recordFailure(ctx context.Context, id string, pubErr error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	_, err := r.pool.Exec(rctx, recordFailureSQL, id, errorText(pubErr))
	return err
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

// selectBatch checks that lockPID still holds the relay's lock, locks and
// reads the next batch of at most limit rows in publishing order, and asks
// the server to end the transaction if it stays idle longer than this
// batch may take. It returns no rows when an older unpublished row is held
// by another transaction (a former leader's batch): publishing past it
// would break the order, so the relay waits for that transaction to end.
func (r *Relay) selectBatch(ctx context.Context, tx pgx.Tx, lockPID uint32, limit int) ([]amqp.Message, error) {
	idleLimit := r.cfg.ConfirmTimeout + 2*finishTimeout
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true)`,
		strconv.FormatInt(idleLimit.Milliseconds(), 10))
	b.Queue(`SELECT EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND pid = $1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND classid = (($2::bigint >> 32) & x'ffffffff'::bigint)::oid
		  AND objid = ($2::bigint & x'ffffffff'::bigint)::oid AND objsubid = 1)`, int64(lockPID), r.cfg.LockKey)
	b.Queue(`SELECT id::text, event_name, routing_key, envelope::text, occurred_at
		FROM outbox
		WHERE published_at IS NULL
		ORDER BY occurred_at, id
		LIMIT $1
		FOR UPDATE SKIP LOCKED`, limit)
	b.Queue(`SELECT id::text FROM outbox WHERE published_at IS NULL ORDER BY occurred_at, id LIMIT 1`)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("set transaction idle timeout: %w", err)
	}
	var held bool
	if err := br.QueryRow().Scan(&held); err != nil {
		return nil, fmt.Errorf("check the relay lock: %w", err)
	}
	if !held {
		return nil, errLockLost
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("select outbox batch: %w", err)
	}
	batch := make([]amqp.Message, 0, limit)
	for rows.Next() {
		var m amqp.Message
		// message_id = event_id, type = event_name, timestamp = occurred_at,
		// body = the stored envelope (docs/architecture.md, flow step 3).
		if err := rows.Scan(&m.MessageID, &m.Type, &m.RoutingKey, &m.Body, &m.Timestamp); err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan outbox row: %w", err)
		}
		batch = append(batch, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("select outbox batch: %w", err)
	}
	var head string
	switch err := br.QueryRow().Scan(&head); {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("select first unpublished row: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("select outbox batch: %w", err)
	}
	if len(batch) > 0 && head != "" && head != batch[0].MessageID {
		r.logger.DebugContext(ctx, "outbox relay waits: an older row is held by another transaction", slog.String("event_id", head))
		return nil, nil
	}
	return batch, nil
}

// publish sends the batch in the configured mode and returns the length of
// the confirmed prefix and the error that ended it. In OneAtATime mode
// ConfirmTimeout bounds the whole batch too: when it is spent, the batch
// ends early without an error and the rest waits for the next one.
func (r *Relay) publish(ctx context.Context, msgs []amqp.Message) (int, error) {
	start := time.Now()
	if r.cfg.Mode == OneAtATime {
		deadline := start.Add(r.cfg.ConfirmTimeout)
		for i := range msgs {
			t0 := time.Now()
			left := deadline.Sub(t0)
			if left <= 0 {
				return i, nil
			}
			if err := r.pub.PublishOne(ctx, msgs[i], left); err != nil {
				return i, err
			}
			r.m.confirmLatency.Observe(time.Since(t0).Seconds())
		}
		return len(msgs), nil
	}
	confirmed, err := r.pub.PublishBatch(ctx, msgs, r.cfg.ConfirmTimeout)
	if err == nil {
		r.m.confirmLatency.Observe(time.Since(start).Seconds())
	}
	return confirmed, err
}

// refreshStats keeps the backlog gauges current until ctx ends. Every relay
// reports them, leader or not, so an alert sees the backlog even when no
// relay leads.
func (r *Relay) refreshStats(ctx context.Context) {
	for {
		qctx, cancel := context.WithTimeout(ctx, finishTimeout)
		var count int64
		var age float64
		err := r.pool.QueryRow(qctx, `SELECT count(*),
			COALESCE(EXTRACT(EPOCH FROM now() - min(occurred_at)), 0)::float8
			FROM outbox WHERE published_at IS NULL`).Scan(&count, &age)
		cancel()
		switch {
		case err == nil:
			r.m.unpublished.Set(float64(count))
			r.m.oldestAge.Set(max(age, 0))
		case ctx.Err() == nil:
			r.logger.WarnContext(ctx, "outbox relay: backlog query failed", slog.Any("error", err))
		}
		if backoff.Sleep(ctx, r.cfg.StatsInterval) != nil {
			return
		}
	}
}
