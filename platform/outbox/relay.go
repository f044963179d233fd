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

	"example.com/shop/platform/amqp"
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
	// looks at the outbox anyway, and how long it waits after a failed batch
	// before trying again (default 1 s).
	PollInterval time.Duration
	// ConfirmTimeout bounds the publishing of one batch, from opening a
	// channel to the last confirm (default 5 s). It also bounds how long the
	// batch's transaction stays open while the relay talks to the broker.
	ConfirmTimeout time.Duration
	// Mode is Pipelined (the default) or OneAtATime.
	Mode Mode
	// LockKey is the id of the PostgreSQL advisory lock that elects the one
	// active relay of a database (0 means DefaultLockKey).
	LockKey int64
	// LockRetry is how often a standby relay tries to take the lock, how
	// often the leader checks that its lock connection is alive, and how long
	// a relay that lost the lock waits before it contends again (default 1 s).
	LockRetry time.Duration
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
// (DESIGN.md rule 2). Run it in its own process (bin/order relay); start as
// many as you like, one leads and the others stand by.
//
// Guarantees:
//   - At least once, never a loss: a row is marked published only after the
//     broker confirmed its message (acked and not returned). A crash or a
//     failure between the confirm and the commit leaves the row unmarked,
//     and it is published again: consumers see a duplicate, never a gap.
//   - Never a ghost: only committed rows are visible to the relay.
//   - Order: rows go out in (occurred_at, id) order. The first message of a
//     batch that fails (nack, return, timeout, lost channel) stops the batch:
//     the prefix before it is marked, the row gets attempts+1 and last_error,
//     and everything from it on is retried in the next batch, in order.
//     Ordering holds while one relay leads; across a change of leader a
//     batch still held by the old leader's open transaction can go out
//     after newer rows (SKIP LOCKED), for at most ConfirmTimeout.
//   - One active relay: a session-level advisory lock (LockKey) held on a
//     dedicated connection. The leader stops publishing as soon as that
//     connection is lost and goes back to standby; a standby takes over
//     within about LockRetry once the lock is free.
//   - Bounded transactions: a batch's transaction lives for at most
//     ConfirmTimeout plus a few seconds of database work; the server ends it
//     too (idle_in_transaction_session_timeout) if the process hangs.
//
// Latency: a leader waits for NOTIFY on NotifyChannel (sent by the outbox
// insert trigger) and polls every PollInterval as a fallback; full batches
// are followed by the next one at once.
//
// A Relay is used by one Run at a time; Leader may be called concurrently.
type Relay struct {
	pool   *pgxpool.Pool
	pub    *amqp.Publisher
	cfg    RelayConfig
	logger *slog.Logger
	m      *relayMetrics
	leader atomic.Bool

	// Test hooks, nil in production: called before publishing a batch of n
	// messages, and after publishing with the confirmed count, before the
	// rows are marked.
	beforePublish func(n int)
	afterPublish  func(confirmed int)
}

// NewRelay returns a Relay that reads the outbox table through pool and
// publishes with pub, which must publish to the events exchange. The relay
// takes its lock and LISTEN connection with pool's connection settings but
// outside the pool. Metrics are registered on reg (see newRelayMetrics for
// the names); a nil logger discards logs. It returns an error for a
// negative setting or when the metrics cannot be registered (for example
// registered twice on one registry).
func NewRelay(pool *pgxpool.Pool, pub *amqp.Publisher, cfg RelayConfig, logger *slog.Logger, reg prometheus.Registerer) (*Relay, error) {
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
	return &Relay{
		pool:   pool,
		pub:    pub,
		cfg:    cfg,
		logger: logger.With(slog.String("component", "outbox-relay")),
		m:      m,
	}, nil
}

// Leader reports whether this relay currently holds the lock and publishes
// (the relay_leader gauge). A standby relay is healthy: it reports false.
func (r *Relay) Leader() bool { return r.leader.Load() }

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
		slog.Int64("lock_key", r.cfg.LockKey))
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
		if sleep(ctx, r.cfg.LockRetry) != nil {
			return nil
		}
	}
}

// standBy returns a dedicated connection that holds the advisory lock,
// trying every LockRetry. It returns an error only when ctx ends.
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
				_ = conn.Close(context.WithoutCancel(ctx))
				conn = nil
			}
		}
		if err := sleep(ctx, r.cfg.LockRetry); err != nil {
			if conn != nil {
				_ = conn.Close(context.WithoutCancel(ctx))
			}
			return nil, err
		}
	}
}

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
	}()

	for {
		n, err := r.publishBatch(leaderCtx)
		if leaderCtx.Err() != nil {
			return context.Cause(leaderCtx)
		}
		var wait <-chan struct{} = wake
		switch {
		case err != nil:
			r.logger.WarnContext(ctx, "outbox relay batch failed", slog.Any("error", err))
			wait = nil // back off for PollInterval, however busy the outbox is
		case n == r.cfg.BatchSize:
			continue
		}
		t := time.NewTimer(r.cfg.PollInterval)
		select {
		case <-wait:
		case <-t.C:
		case <-leaderCtx.Done():
		}
		t.Stop()
	}
}

// watch waits for notifications on conn and forwards them to wake. Every
// LockRetry without one it pings conn; when conn fails it ends leadership
// through lose.
func (r *Relay) watch(ctx context.Context, conn *pgx.Conn, wake chan<- struct{}, lose context.CancelCauseFunc) {
	for {
		wctx, cancel := context.WithTimeout(ctx, r.cfg.LockRetry)
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
			continue
		}
		if idle && !conn.IsClosed() {
			pctx, cancel := context.WithTimeout(ctx, r.cfg.LockRetry+finishTimeout)
			err = conn.Ping(pctx)
			cancel()
			if err == nil || ctx.Err() != nil {
				continue
			}
		}
		lose(fmt.Errorf("lock connection lost: %w", err))
		return
	}
}

// publishBatch runs one cycle in one transaction: select a batch, publish
// it, mark the confirmed prefix, record the first failure, commit. It
// returns the number of rows selected and the batch's error, if any.
func (r *Relay) publishBatch(ctx context.Context) (int, error) {
	// Database work outlives ctx so that a confirmed prefix is still marked
	// on shutdown, but it is bounded.
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ConfirmTimeout+2*finishTimeout)
	defer cancel()

	var n, marked int
	var batchErr error
	err := pg.WithTx(txCtx, r.pool, func(tx pgx.Tx) error {
		rows, err := r.selectBatch(ctx, tx)
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
		confirmed, pubErr := r.publish(ctx, rows)
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
		if pubErr != nil && ctx.Err() == nil {
			// A broker failure, not our shutdown: count it on the row that
			// stopped the batch.
			msg := pubErr.Error()
			if len(msg) > maxErrorLen {
				msg = msg[:maxErrorLen]
			}
			b.Queue(`UPDATE outbox SET attempts = attempts + 1, last_error = $2 WHERE id = $1::uuid`, rows[confirmed].MessageID, msg)
			batchErr = pubErr
		}
		if b.Len() > 0 {
			if err := tx.SendBatch(txCtx, b).Close(); err != nil {
				return fmt.Errorf("mark %d published rows: %w", confirmed, err)
			}
		}
		marked = confirmed
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return n, nil // shutdown or leadership lost: not a failure
		}
		return n, fmt.Errorf("outbox relay batch: %w", err)
	}
	r.m.published.Add(float64(marked))
	if batchErr != nil {
		r.m.failures.Inc()
		return n, fmt.Errorf("outbox relay batch: %w", batchErr)
	}
	return n, nil
}

// selectBatch locks and reads the next batch in publishing order, and asks
// the server to end the transaction if it stays idle longer than this
// batch may take.
func (r *Relay) selectBatch(ctx context.Context, tx pgx.Tx) ([]amqp.Message, error) {
	idleLimit := r.cfg.ConfirmTimeout + 2*finishTimeout
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true)`,
		strconv.FormatInt(idleLimit.Milliseconds(), 10))
	b.Queue(`SELECT id::text, event_name, routing_key, envelope::text, occurred_at
		FROM outbox
		WHERE published_at IS NULL
		ORDER BY occurred_at, id
		LIMIT $1
		FOR UPDATE SKIP LOCKED`, r.cfg.BatchSize)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, fmt.Errorf("set transaction idle timeout: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, fmt.Errorf("select outbox batch: %w", err)
	}
	batch := make([]amqp.Message, 0, r.cfg.BatchSize)
	for rows.Next() {
		var m amqp.Message
		// message_id = event_id, type = event_name, timestamp = occurred_at,
		// body = the stored envelope (DESIGN.md "Messaging").
		if err := rows.Scan(&m.MessageID, &m.Type, &m.RoutingKey, &m.Body, &m.Timestamp); err != nil {
			rows.Close()
			_ = br.Close()
			return nil, fmt.Errorf("scan outbox row: %w", err)
		}
		batch = append(batch, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		_ = br.Close()
		return nil, fmt.Errorf("select outbox batch: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("select outbox batch: %w", err)
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
		if sleep(ctx, r.cfg.StatsInterval) != nil {
			return
		}
	}
}

// sleep waits for d or until ctx ends, whose error it then returns.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
