package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"example.com/shop/platform/backoff"
)

// lockKeys are the advisory locks (two-int form: class, object) the relays
// of one database agree on, all derived from RelayConfig.LockKey:
//
//   - member (class, N): held shared by every member of the relays with N
//     partitions, on its lock session; who holds it is the membership.
//   - lead (class, p): held by the leader of partition p, on its lock
//     session.
//   - batch (class, p): taken by each batch transaction of partition p
//     (transaction level), so two batches of one partition never overlap,
//     even across a change of leader.
//   - fence (class, N): taken shared by each batch transaction too, which
//     then publishes only if no fence of another count is held: a relay
//     that joined with another count publishes nothing while a batch of a
//     former leader with the old count (frozen, its lock session ended) is
//     still open.
//   - join (class, 0): taken by a joining relay for the length of its join
//     check, so that two relays with different counts cannot both join.
type lockKeys struct {
	member, lead, batch, fence, join int32
	partitions                       int32
}

func newLockKeys(lockKey int64, partitions int) lockKeys {
	base := int32(lockKey & 0x3fffffff) // leaves room for base+4 in an int4
	return lockKeys{
		lead: base, batch: base + 1, member: base + 2, fence: base + 3, join: base + 4,
		partitions: int32(partitions),
	}
}

// currentDB selects the current database's oid, as pg_locks shows it.
const currentDB = `(SELECT oid FROM pg_database WHERE datname = current_database())`

// join returns a lock session that is a member of the relays with this
// partition count, trying every LockRetry; the session is guarded by
// guardLockSession. It returns an error only when ctx ends.
func (r *Relay) join(ctx context.Context) (*pgx.Conn, error) {
	var conn *pgx.Conn
	said := ""
	for {
		if conn == nil {
			c, err := pgx.ConnectConfig(ctx, r.pool.Config().ConnConfig.Copy())
			if err != nil && ctx.Err() == nil {
				r.logger.WarnContext(ctx, "outbox relay: lock connection failed", slog.Any("error", err))
			}
			if err == nil {
				qctx, cancel := context.WithTimeout(ctx, r.cfg.LockTimeout)
				err = r.guardLockSession(qctx, c)
				cancel()
				if err != nil {
					r.logger.WarnContext(ctx, "outbox relay: lock session setup failed", slog.Any("error", err))
					_ = c.Close(context.WithoutCancel(ctx))
					c = nil
				}
			}
			conn = c
		}
		if conn != nil {
			qctx, cancel := context.WithTimeout(ctx, r.cfg.LockTimeout)
			why, err := r.tryJoin(qctx, conn)
			cancel()
			switch {
			case err == nil && why == "":
				r.logger.InfoContext(ctx, "outbox relay joined", slog.Int("partitions", r.cfg.Partitions))
				return conn, nil
			case err == nil:
				if why != said {
					r.logger.InfoContext(ctx, "outbox relay standing by: "+why)
					said = why
				}
			default:
				if ctx.Err() == nil {
					r.logger.WarnContext(ctx, "outbox relay: join query failed", slog.Any("error", err))
				}
				// Closing the session releases any lock it took.
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

// tryJoin makes conn's session a member, unless relays with another
// partition count are members, which it then names. A relay of another
// count whose lock session has ended (stopped, or frozen for LockTimeout)
// is no member, even while a batch transaction of it is still open: this
// relay joins, and its batches wait for that one to end (selectBatch).
func (r *Relay) tryJoin(ctx context.Context, conn *pgx.Conn) (why string, err error) {
	k := r.keys
	tx, err := conn.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int, 0)`, k.join); err != nil {
		return "", fmt.Errorf("join lock: %w", err)
	}
	var others []int64
	if err := tx.QueryRow(ctx, `SELECT COALESCE(array_agg(DISTINCT objid::bigint ORDER BY objid::bigint), '{}')
		FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND database = `+currentDB+`
		  AND classid = $1::bigint::oid AND objid <> $2::bigint::oid`,
		int64(k.member), int64(k.partitions)).Scan(&others); err != nil {
		return "", fmt.Errorf("look for other partition counts: %w", err)
	}
	if len(others) > 0 {
		return fmt.Sprintf("relays with another partition count %v are running (this one has %d)", others, k.partitions), tx.Commit(ctx)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_lock_shared($1::int, $2::int)`, k.member, k.partitions); err != nil {
		return "", fmt.Errorf("member lock: %w", err)
	}
	return "", tx.Commit(ctx)
}

// guardLockSession makes the server end the lock session, and with it its
// locks, when the relay stops talking for LockTimeout: idle_session_timeout
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
		r.logger.WarnContext(ctx, "outbox relay: this PostgreSQL has no idle_session_timeout; a frozen relay keeps its partitions until TCP keepalives end its session")
		return nil
	}
	if err != nil {
		return fmt.Errorf("set lock session idle_session_timeout: %w", err)
	}
	return nil
}

// errLockLost ends a partition's leadership when its batch transaction
// finds that the lock session no longer leads the partition.
var errLockLost = errors.New("the lock session no longer leads the partition")

// partition is one partition this relay leads (or is giving back).
type partition struct {
	n       int
	cancel  context.CancelFunc
	done    chan struct{}
	wake    chan struct{}
	leaving bool // given back: the lock is released once done is closed

	busySince    time.Time // start of the batch being published, zero when none
	failingSince time.Time // first failed batch of the current streak, zero when none
	lastFailure  error
}

// stalled is Ready's verdict on p; the caller holds Relay.mu.
func (p *partition) stalled(now time.Time, limit time.Duration) error {
	if !p.busySince.IsZero() {
		if d := now.Sub(p.busySince); d > limit {
			return fmt.Errorf("outbox relay partition %d: one batch has been publishing for %v", p.n, d.Round(time.Second))
		}
	}
	if !p.failingSince.IsZero() {
		if d := now.Sub(p.failingSince); d > limit {
			return fmt.Errorf("outbox relay partition %d cannot publish for %v: %w", p.n, d.Round(time.Second), p.lastFailure)
		}
	}
	return nil
}

// lockView is who holds which lock, read from pg_locks.
type lockView struct {
	members []uint32       // pids of the member sessions, sorted
	leaders map[int]uint32 // partition -> pid of its leader's session
	counts  map[uint32]int // member pid -> partitions it leads
}

// readLocks reads the membership and the partition leaders.
func (r *Relay) readLocks(ctx context.Context, conn *pgx.Conn) (lockView, error) {
	k := r.keys
	v := lockView{leaders: map[int]uint32{}, counts: map[uint32]int{}}
	rows, err := conn.Query(ctx, `SELECT classid::bigint, objid::bigint, pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND database = `+currentDB+`
		  AND ((classid = $1::bigint::oid AND objid = $2::bigint::oid) OR (classid = $3::bigint::oid AND objid < $2::bigint::oid))`,
		int64(k.member), int64(k.partitions), int64(k.lead))
	if err != nil {
		return v, err
	}
	defer rows.Close()
	for rows.Next() {
		var class, obj int64
		var pid uint32
		if err := rows.Scan(&class, &obj, &pid); err != nil {
			return v, err
		}
		if class == int64(k.member) {
			v.members = append(v.members, pid)
			continue
		}
		v.leaders[int(obj)] = pid
	}
	if err := rows.Err(); err != nil {
		return v, err
	}
	slices.Sort(v.members)
	v.members = slices.Compact(v.members)
	for _, pid := range v.members {
		v.counts[pid] = 0
	}
	for _, pid := range v.leaders {
		if _, ok := v.counts[pid]; ok {
			v.counts[pid]++
		}
	}
	return v, nil
}

// plan decides, from v, which partitions the member me gives back and how
// many free ones it may take. Rules, applied by every member each
// LockRetry: the share is ceil(N/R) for R members; a member leading more
// gives the rest back; when the busiest member leads two or more than the
// idlest, the busiest (the lowest pid among equals) gives one back; a
// member takes free partitions only while it is among the idlest and below
// the share. Together they converge to every member leading N/R rounded
// down or up, and a dead member's partitions are taken at the next round.
func plan(v lockView, me uint32, mine []int, partitions int) (giveBack []int, take int) {
	r := max(len(v.members), 1)
	share := (partitions + r - 1) / r
	lo, hi := len(mine), len(mine)
	for _, c := range v.counts {
		lo, hi = min(lo, c), max(hi, c)
	}
	slices.Sort(mine)
	switch {
	case len(mine) > share:
		return mine[share:], 0
	case hi-lo >= 2 && len(mine) == hi:
		first := true
		for pid, c := range v.counts {
			if c == hi && pid < me {
				first = false
			}
		}
		if first {
			return mine[len(mine)-1:], 0
		}
		return nil, 0
	}
	if len(mine) == lo && len(mine) < share {
		return nil, share - len(mine)
	}
	return nil, 0
}

// coordinate runs the partitions conn's session leads until the session
// fails or ctx ends: every LockRetry (and LockKeepalive) it reads the locks,
// gives partitions back, takes free ones and starts and stops their
// workers; between rounds it forwards NOTIFY wake-ups to the workers. It
// returns why it ended, after stopping every worker and closing conn, which
// releases the locks.
func (r *Relay) coordinate(ctx context.Context, conn *pgx.Conn) error {
	parts := map[int]*partition{}
	var wg sync.WaitGroup
	defer r.stopAll(ctx, conn, parts, &wg)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{NotifyChannel}.Sanitize()); err != nil {
		return fmt.Errorf("listen %s: %w", NotifyChannel, err)
	}
	me := conn.PgConn().PID()
	tick := min(r.cfg.LockRetry, r.cfg.LockKeepalive)
	next := time.Now()
	for {
		if wait := time.Until(next); wait > 0 {
			wctx, cancel := context.WithTimeout(ctx, wait)
			_, err := conn.WaitForNotification(wctx)
			timedOut := wctx.Err() != nil
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err == nil {
				for _, p := range parts {
					select {
					case p.wake <- struct{}{}:
					default:
					}
				}
				continue
			}
			if !timedOut || conn.IsClosed() {
				return fmt.Errorf("lock connection lost: %w", err)
			}
		}
		next = time.Now().Add(tick)
		if err := r.round(ctx, conn, me, parts, &wg); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	}
}

// stopAll stops every worker of parts, waits for them, and closes conn,
// which releases the locks.
func (r *Relay) stopAll(ctx context.Context, conn *pgx.Conn, parts map[int]*partition, wg *sync.WaitGroup) {
	for _, p := range parts {
		p.cancel()
	}
	wg.Wait()
	r.mu.Lock()
	clear(r.parts)
	r.mu.Unlock()
	for p := range parts {
		r.m.partLeader.WithLabelValues(strconv.Itoa(p)).Set(0)
	}
	r.leading.Store(0)
	r.m.leader.Set(0)
	limit := finishTimeout
	if ctx.Err() != nil {
		limit = stopTimeout // the relay stops
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	_ = conn.Close(closeCtx)
}

// round is one look at the locks: release what was given back and has
// stopped, notice lost partitions, give back and take per plan.
func (r *Relay) round(ctx context.Context, conn *pgx.Conn, me uint32, parts map[int]*partition, wg *sync.WaitGroup) error {
	qctx, cancel := context.WithTimeout(ctx, r.cfg.LockTimeout)
	defer cancel()
	if err := r.release(ctx, qctx, conn, parts); err != nil {
		return err
	}
	v, err := r.readLocks(qctx, conn)
	if err != nil {
		return fmt.Errorf("read the relay locks: %w", err)
	}
	if !slices.Contains(v.members, me) {
		return errors.New("the lock session is no longer a member")
	}
	var mine []int
	for n, p := range parts {
		if v.leaders[n] != me {
			// Cannot happen while the session lives; stop publishing it.
			r.logger.WarnContext(ctx, "outbox relay no longer holds a partition's lock", slog.Int("partition", n))
			p.cancel()
			continue
		}
		if !p.leaving {
			mine = append(mine, n)
		}
	}
	giveBack, take := plan(v, me, mine, r.cfg.Partitions)
	for _, n := range giveBack {
		parts[n].leaving = true
		parts[n].cancel()
	}
	if take == 0 {
		return nil
	}
	return r.take(ctx, qctx, conn, v, me, take, parts, wg)
}

// release gives up the lead lock of every partition whose worker has ended.
func (r *Relay) release(ctx, qctx context.Context, conn *pgx.Conn, parts map[int]*partition) error {
	for n, p := range parts {
		select {
		case <-p.done:
		default:
			continue
		}
		// Stopped: given back, or it found its lock gone. Either way the
		// worker is over, so releasing cannot overlap one of its batches.
		if _, err := conn.Exec(qctx, `SELECT pg_advisory_unlock($1::int, $2::int)`, r.keys.lead, n); err != nil {
			return fmt.Errorf("release partition %d: %w", n, err)
		}
		r.stopped(n, parts)
		if !p.leaving {
			r.logger.WarnContext(ctx, "outbox relay lost a partition", slog.Int("partition", n))
		} else {
			r.logger.InfoContext(ctx, "outbox relay gave a partition back", slog.Int("partition", n))
		}
	}
	return nil
}

// take tries to lead up to want of the partitions nobody leads in v, and
// starts a worker for each it got.
func (r *Relay) take(ctx, qctx context.Context, conn *pgx.Conn, v lockView, me uint32, want int, parts map[int]*partition, wg *sync.WaitGroup) error {
	var free []int32
	for n := range r.cfg.Partitions {
		if _, held := v.leaders[n]; !held {
			if _, ours := parts[n]; !ours {
				free = append(free, int32(n))
			}
		}
	}
	if len(free) == 0 {
		return nil
	}
	// Start where the other idle members are unlikely to: at an offset
	// given by this session's pid.
	off := int(me) % len(free)
	free = append(free[off:], free[:off]...)
	free = free[:min(want, len(free))]
	var got []int32
	if err := conn.QueryRow(qctx, `SELECT COALESCE(array_agg(p ORDER BY p), '{}') FROM unnest($2::int[]) AS p
		WHERE pg_try_advisory_lock($1::int, p)`, r.keys.lead, free).Scan(&got); err != nil {
		return fmt.Errorf("take partitions: %w", err)
	}
	for _, p := range got {
		r.started(ctx, int(p), me, parts, wg)
	}
	return nil
}

// started runs a worker for partition n, now led by this relay.
func (r *Relay) started(ctx context.Context, n int, lockPID uint32, parts map[int]*partition, wg *sync.WaitGroup) {
	pctx, cancel := context.WithCancel(ctx)
	p := &partition{n: n, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	parts[n] = p
	r.mu.Lock()
	r.parts[n] = p
	r.mu.Unlock()
	r.leading.Add(1)
	r.m.leader.Set(1)
	r.m.partLeader.WithLabelValues(strconv.Itoa(n)).Set(1)
	r.logger.InfoContext(ctx, "outbox relay leads a partition", slog.Int("partition", n), slog.Int("partitions", r.cfg.Partitions))
	w := r.newWorker(ctx, pctx, p, lockPID)
	wg.Go(func() {
		defer close(p.done)
		w.run()
	})
}

// stopped forgets partition n, whose worker has ended and lock is released.
func (r *Relay) stopped(n int, parts map[int]*partition) {
	delete(parts, n)
	r.mu.Lock()
	delete(r.parts, n)
	r.mu.Unlock()
	if r.leading.Add(-1) == 0 {
		r.m.leader.Set(0)
	}
	r.m.partLeader.WithLabelValues(strconv.Itoa(n)).Set(0)
}
