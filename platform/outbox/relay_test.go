package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/pg"
	"example.com/shop/testkit"
)

func TestRelayPublishesConcurrentWritesExactlyOnceInOrder(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	r := newTestRelay(t, pool, newPublisher(t, topo), fastConfig())
	start(t, r)

	// 10 writers, each committing 100 events one transaction at a time
	// while the relay runs.
	const writers, perWriter = 10, 100
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				err := pg.WithTx(t.Context(), pool, func(tx pgx.Tx) error {
					insertEvent(t, t.Context(), tx, contracts.EventOrderPlaced, fmt.Sprintf("w%02d-%03d", w, i))
					return nil
				})
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()

	got := receive(t, in, writers*perWriter)
	if extra := drain(in, 500*time.Millisecond); len(extra) > 0 {
		t.Fatalf("%d messages more than written", len(extra))
	}
	seen := map[string]bool{}
	last := map[string]int{} // writer -> last sequence number seen
	for _, d := range got {
		if seen[d.MessageId] {
			t.Fatalf("message %s delivered twice", d.MessageId)
		}
		seen[d.MessageId] = true
		var env contracts.Envelope
		if err := json.Unmarshal(d.Body, &env); err != nil {
			t.Fatalf("body of %s: %v", d.MessageId, err)
		}
		var w string
		var seq int
		if _, err := fmt.Sscanf(env.CorrelationID, "w%2s-%03d", &w, &seq); err != nil {
			t.Fatalf("correlation id %q: %v", env.CorrelationID, err)
		}
		if prev, ok := last[w]; ok && seq != prev+1 {
			t.Fatalf("writer %s: event %d arrived after event %d", w, seq, prev)
		} else if !ok && seq != 0 {
			t.Fatalf("writer %s: event %d arrived first", w, seq)
		}
		last[w] = seq
	}
	state := readOutbox(t, pool)
	for id, s := range state {
		if !s.Published || s.Attempts != 0 || !seen[id] {
			t.Fatalf("row %s: %+v, delivered %v", id, s, seen[id])
		}
	}
	if len(state) != writers*perWriter {
		t.Fatalf("%d rows, want %d", len(state), writers*perWriter)
	}
	if v := testutil.ToFloat64(r.m.published); v != writers*perWriter {
		t.Fatalf("relay_published_total = %v", v)
	}
}

func TestRelayPublishesBacklogInOccurredAtOrder(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)

	// Commit in an order other than occurred_at: the batches of the relay
	// (64 rows, so it chains many) must follow occurred_at, id.
	const n = 1000
	for i := range n {
		insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(i))
	}
	if _, err := pool.Exec(t.Context(), `UPDATE outbox SET occurred_at = occurred_at - random() * interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	want := orderedIDs(t, pool)

	cfg := fastConfig()
	cfg.BatchSize = 64
	r := newTestRelay(t, pool, newPublisher(t, topo), cfg)
	start(t, r)
	got := receive(t, in, n)
	for i, d := range got {
		if d.MessageId != want[i] {
			t.Fatalf("message %d is %s, want %s", i, d.MessageId, want[i])
		}
	}
	eventually(t, "all rows marked", func() bool { return countUnpublished(t, pool) == 0 })
	if c := testutil.CollectAndCount(r.reg, "relay_batch_size"); c != 1 {
		t.Fatalf("relay_batch_size collected %d series", c)
	}
}

func TestRelayMessageCarriesEnvelopeAndProperties(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	id := insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, "corr-1")
	var stored []byte
	var occurred time.Time
	if err := pool.QueryRow(t.Context(), `SELECT envelope::text, occurred_at FROM outbox WHERE id = $1`, id).Scan(&stored, &occurred); err != nil {
		t.Fatal(err)
	}
	start(t, newTestRelay(t, pool, newPublisher(t, topo), fastConfig()))

	d := receive(t, in, 1)[0]
	if d.MessageId != id || d.Type != contracts.EventOrderPlaced || d.RoutingKey != contracts.EventOrderPlaced ||
		d.ContentType != "application/json" || d.DeliveryMode != amqp091.Persistent {
		t.Fatalf("properties: id %q type %q key %q content type %q mode %d", d.MessageId, d.Type, d.RoutingKey, d.ContentType, d.DeliveryMode)
	}
	if !d.Timestamp.Equal(occurred.Truncate(time.Second)) {
		t.Fatalf("timestamp %v, want %v", d.Timestamp, occurred.Truncate(time.Second))
	}
	if string(d.Body) != string(stored) {
		t.Fatalf("body %s, want the stored envelope %s", d.Body, stored)
	}
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	env, err := v.Decode(d.Body)
	if err != nil {
		t.Fatalf("body is not a valid envelope: %v", err)
	}
	if env.EventID.String() != id || env.CorrelationID != "corr-1" {
		t.Fatalf("envelope %+v", env)
	}
}

// The batch's transaction dies after the broker confirmed the batch and
// before it commits (as when the relay crashes there): nothing is marked,
// and the batch is published again: duplicates, nothing lost, in order.
func TestRelayFailureBeforeCommitRepublishes(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	const n = 50
	for i := range n {
		insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(i))
	}

	var killed atomic.Bool
	pub := &hookedPublisher{Publisher: newPublisher(t, topo), after: func(confirmed int) {
		if killed.Swap(true) {
			return
		}
		if confirmed != n {
			t.Errorf("confirmed %d of %d before the failure", confirmed, n)
		}
		if _, err := pool.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()`); err != nil {
			t.Errorf("end the batch transaction: %v", err)
		}
	}}
	start(t, newTestRelay(t, pool, pub, fastConfig()))
	first := receive(t, in, n)
	second := receive(t, in, n)
	eventually(t, "all rows marked", func() bool { return countUnpublished(t, pool) == 0 })
	want := orderedIDs(t, pool)
	for i := range n {
		if first[i].MessageId != want[i] || second[i].MessageId != want[i] {
			t.Fatalf("message %d: %s then %s, want %s both times", i, first[i].MessageId, second[i].MessageId, want[i])
		}
	}
}

// A deleted exchange is declared again by the publisher (amqp.Publisher's
// repair after 404 NOT_FOUND): the relay goes on publishing, in order, with
// no restart and no row left behind. (A broker that keeps refusing is
// TestRelayRetriesOnlyTheFailingRowWhileAQueueRefuses.)
func TestRelayPublishesPastADeletedExchange(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	r := newTestRelay(t, pool, newPublisher(t, topo), fastConfig())
	start(t, r)
	insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, "first")
	receive(t, in, 1)

	if err := rawChannel(t).ExchangeDelete(topo.Exchange, false, false); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(i))
	}
	got := receive(t, in, n)
	want := orderedIDs(t, pool)[1:]
	for i, d := range got {
		if d.MessageId != want[i] {
			t.Fatalf("message %d is %s, want %s", i, d.MessageId, want[i])
		}
	}
	eventually(t, "all rows marked", func() bool { return countUnpublished(t, pool) == 0 })
}

func TestRelayPublishesAgainAfterTheBrokerDropsItsConnection(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	pub, name := newNamedPublisher(t, topo)
	r := newTestRelay(t, pool, pub, fastConfig())
	start(t, r)

	const n = 20
	for i := range n {
		insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(i))
	}
	receive(t, in, n)

	testkit.CloseConnection(t, name)
	for i := range n {
		insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(n+i))
	}
	seen := map[string]bool{}
	for _, d := range receive(t, in, n) {
		seen[d.MessageId] = true
	}
	eventually(t, "all rows marked", func() bool { return countUnpublished(t, pool) == 0 })
	for _, d := range drain(in, 200*time.Millisecond) {
		seen[d.MessageId] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages after the reconnect, want %d", len(seen), n)
	}
}

func TestRelayUnroutableEventIsKept(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.UnroutableQueue)
	id := insertEvent(t, t.Context(), pool, unroutableKey, "lost?")
	start(t, newTestRelay(t, pool, newPublisher(t, topo), fastConfig()))

	d := receive(t, in, 1)[0]
	if d.MessageId != id || d.RoutingKey != unroutableKey {
		t.Fatalf("unroutable queue got %s with key %q", d.MessageId, d.RoutingKey)
	}
	eventually(t, "row marked", func() bool { return readOutbox(t, pool)[id].Published })
}

func TestRelayOnlyOneLeaderPublishesAndAStandbyTakesOver(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)

	a := newTestRelay(t, pool, newPublisher(t, topo), fastConfig())
	stopA := start(t, a)
	eventually(t, "a leads", a.Leader)
	b := newTestRelay(t, pool, newPublisher(t, topo), fastConfig())
	start(t, b)
	time.Sleep(200 * time.Millisecond) // several lock attempts by b
	if b.Leader() || testutil.ToFloat64(b.m.leader) != 0 || testutil.ToFloat64(a.m.leader) != 1 {
		t.Fatalf("leaders: a %v, b %v", a.Leader(), b.Leader())
	}

	const n = 100
	for i := range n {
		insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(i))
	}
	receive(t, in, n)
	eventually(t, "a counts every row", func() bool { return testutil.ToFloat64(a.m.published) == n })
	if pb := testutil.ToFloat64(b.m.published); pb != 0 {
		t.Fatalf("the standby published %v rows", pb)
	}

	// Rows keep coming while the leader stops.
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(n+i))
			time.Sleep(time.Millisecond)
		}
	})
	stopA()
	eventually(t, "b takes over", b.Leader)
	wg.Wait()
	got := receive(t, in, n)
	seen := map[string]bool{}
	for _, d := range got {
		seen[d.MessageId] = true
	}
	eventually(t, "all rows marked", func() bool { return countUnpublished(t, pool) == 0 })
	if len(seen) != n {
		t.Fatalf("%d distinct messages after the takeover, want %d", len(seen), n)
	}
}

func TestRelayLosingItsLockConnectionStepsDown(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)

	// a would retry the lock only after an hour, so b must take over.
	slow := fastConfig()
	slow.LockRetry = time.Hour
	a := newTestRelay(t, pool, newPublisher(t, topo), slow)
	start(t, a)
	eventually(t, "a leads", a.Leader)
	b := newTestRelay(t, pool, newPublisher(t, topo), fastConfig())
	start(t, b)

	var killed bool
	if err := pool.QueryRow(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::bigint::oid AND objid = 0
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		int64(a.keys.lead)).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate a's lock session: %v %v", killed, err)
	}
	eventually(t, "a steps down", func() bool { return !a.Leader() })
	eventually(t, "b takes over", b.Leader)

	const n = 50
	for i := range n {
		insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(i))
	}
	receive(t, in, n)
	eventually(t, "all rows marked", func() bool { return countUnpublished(t, pool) == 0 })
	if pa := testutil.ToFloat64(a.m.published); pa != 0 {
		t.Fatalf("a published %v rows after losing its lock", pa)
	}
}

func TestRelayStandsByWhileTheLockIsHeld(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)

	// Another session leads the only partition.
	lead := newLockKeys(DefaultLockKey, 1).lead
	holder, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(t.Context(), `SELECT pg_advisory_lock($1::int, 0)`, lead); err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := range n {
		insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(i))
	}
	if _, err := pool.Exec(t.Context(), `UPDATE outbox SET occurred_at = now() - interval '90 seconds'`); err != nil {
		t.Fatal(err)
	}
	r := newTestRelay(t, pool, newPublisher(t, topo), fastConfig())
	start(t, r)

	// The backlog is visible on a standby.
	eventually(t, "backlog gauges", func() bool {
		return testutil.ToFloat64(r.m.unpublished) == n && testutil.ToFloat64(r.m.oldestAge) >= 90
	})
	if r.Leader() || testutil.ToFloat64(r.m.leader) != 0 {
		t.Fatal("relay leads while another session holds the lock")
	}
	if got := drain(in, 200*time.Millisecond); len(got) != 0 {
		t.Fatalf("a standby published %d messages", len(got))
	}

	if _, err := holder.Exec(t.Context(), `SELECT pg_advisory_unlock($1::int, 0)`, lead); err != nil {
		t.Fatal(err)
	}
	receive(t, in, n)
	eventually(t, "gauges back to zero", func() bool {
		return testutil.ToFloat64(r.m.unpublished) == 0 && testutil.ToFloat64(r.m.oldestAge) == 0 &&
			testutil.ToFloat64(r.m.leader) == 1
	})
}

func TestRelayWakesUpOnNotify(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	cfg := fastConfig()
	cfg.PollInterval = time.Hour // only NOTIFY can wake it
	var batches atomic.Int32
	pub := &hookedPublisher{Publisher: newPublisher(t, topo), before: func(int) { batches.Add(1) }}
	r := newTestRelay(t, pool, pub, cfg)
	start(t, r)
	eventually(t, "relay leads", r.Leader)
	time.Sleep(100 * time.Millisecond) // its first, empty batch is done; it sleeps now

	for i := range 3 {
		id := insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(i))
		if d := receive(t, in, 1)[0]; d.MessageId != id {
			t.Fatalf("got %s, want %s", d.MessageId, id)
		}
	}
	if b := batches.Load(); b != 3 {
		t.Fatalf("%d batches, want 3", b)
	}
}

func TestRelayShutdownMarksOnlyConfirmedRows(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	const n = 2000
	for i := range n {
		insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(i))
	}

	delivered := map[string]bool{}
	for round, delay := range []time.Duration{0, 200 * time.Microsecond, time.Millisecond, 3 * time.Millisecond} {
		// Stop the relay while its third batch is being published.
		cfg := fastConfig()
		cfg.BatchSize = 200
		ctx, cancel := context.WithCancel(t.Context())
		var calls atomic.Int32
		pub := &hookedPublisher{Publisher: newPublisher(t, topo), before: func(int) {
			if calls.Add(1) == 3 {
				if delay == 0 {
					cancel()
				} else {
					time.AfterFunc(delay, cancel)
				}
			}
		}}
		r := newTestRelay(t, pool, pub, cfg)
		if err := r.Run(ctx); err != nil {
			t.Fatalf("round %d: run: %v", round, err)
		}
		cancel()

		for _, d := range drain(in, 300*time.Millisecond) {
			delivered[d.MessageId] = true
		}
		marked := 0
		for id, s := range readOutbox(t, pool) {
			if s.Attempts != 0 {
				t.Fatalf("round %d: row %s counts %d attempts after a shutdown", round, id, s.Attempts)
			}
			if s.Published {
				marked++
				if !delivered[id] {
					t.Fatalf("round %d: row %s is marked but its message never arrived", round, id)
				}
			}
		}
		t.Logf("round %d (cancel after %v): %d delivered, %d marked", round, delay, len(delivered), marked)
	}

	// A fresh relay publishes the rest.
	start(t, newTestRelay(t, pool, newPublisher(t, topo), fastConfig()))
	eventually(t, "all rows marked", func() bool { return countUnpublished(t, pool) == 0 })
	for _, d := range drain(in, 300*time.Millisecond) {
		delivered[d.MessageId] = true
	}
	if len(delivered) != n {
		t.Fatalf("%d distinct messages delivered, want %d", len(delivered), n)
	}
}

func TestNewRelayConfig(t *testing.T) {
	t.Parallel()
	r, err := NewRelay(nil, nil, RelayConfig{}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	want := RelayConfig{
		Partitions: 1, BatchSize: DefaultBatchSize, PollInterval: DefaultPollInterval, ConfirmTimeout: DefaultConfirmTimeout,
		LockKey: DefaultLockKey, LockRetry: DefaultLockRetry, StatsInterval: DefaultStatsInterval,
		LockTimeout: DefaultLockTimeout, LockKeepalive: DefaultLockKeepalive, MaxBackoff: DefaultMaxBackoff,
		StallTimeout: DefaultStallTimeout,
	}
	if !reflect.DeepEqual(r.cfg, want) {
		t.Fatalf("defaults %+v, want %+v", r.cfg, want)
	}
	_, err = NewRelay(nil, nil, RelayConfig{BatchSize: -1, ConfirmTimeout: -time.Second, Partitions: MaxPartitions + 1}, nil, prometheus.NewRegistry())
	for _, s := range []string{"BatchSize", "ConfirmTimeout", "Partitions"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Fatalf("err %v does not name %s", err, s)
		}
	}
	_, err = NewRelay(nil, nil, RelayConfig{LockTimeout: time.Second, LockKeepalive: 600 * time.Millisecond}, nil, prometheus.NewRegistry())
	if err == nil || !strings.Contains(err.Error(), "LockKeepalive") {
		t.Fatalf("a keepalive over half the lock timeout: err %v", err)
	}
	reg := prometheus.NewRegistry()
	if _, err := NewRelay(nil, nil, RelayConfig{}, nil, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRelay(nil, nil, RelayConfig{}, nil, reg); err == nil {
		t.Fatal("second relay on one registry: no error")
	}
}

// nackAt sends the batches of its Publisher's streams unchanged, except
// the batch numbered batch (from 1) of the first stream, of which it sends
// only the first at messages and then reports the next one nacked, as the
// broker does when it refuses a message; it sends nothing after that.
type nackAt struct {
	Publisher
	batch, at int
	streams   atomic.Int32
}

func (f *nackAt) Stream(ctx context.Context, timeout time.Duration) Stream {
	s := &nackStream{Stream: f.Publisher.Stream(ctx, timeout), failAt: -1}
	if f.streams.Add(1) == 1 {
		s.batch, s.at = f.batch, f.at
	}
	return s
}

type nackStream struct {
	Stream
	batch, at     int
	batches, sent int
	failAt        int // stream index of the refused message, -1 before
	failID        string
}

func (s *nackStream) Send(msgs []amqp.Message) {
	s.batches++
	switch {
	case s.failAt >= 0:
		return
	case s.batches == s.batch && len(msgs) > s.at:
		s.failAt, s.failID = s.sent+s.at, msgs[s.at].MessageID
		msgs = msgs[:s.at]
	}
	s.sent += len(msgs)
	s.Stream.Send(msgs)
}

func (s *nackStream) Wait(n int) (int, error) {
	if s.failAt < 0 || n <= s.failAt {
		return s.Stream.Wait(n)
	}
	if confirmed, err := s.Stream.Wait(s.failAt); err != nil {
		return confirmed, err
	}
	return s.failAt, &amqp.PublishError{Index: s.failAt, MessageID: s.failID, Err: amqp.ErrNacked}
}

// One transaction publishes several batches on one stream, the next one
// sent while the one before is confirmed and marked; a failure in the
// second batch marks the first batch and the second's confirmed prefix in
// that transaction and records the failure on the refused row; the rest
// follows later in order (here the refusing stream sends nothing after the
// failure, so each message arrives once).
func TestRelayPipelinesBatchesInATransactionAndStopsAtTheFirstFailure(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	const n, size, at = 45, 10, 3
	for i := range n {
		insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(i))
	}
	want := orderedIDs(t, pool)

	cfg := fastConfig()
	cfg.BatchSize = size
	cfg.PollInterval = 300 * time.Millisecond // the retry of the refused row comes well after the commit
	pub := &nackAt{Publisher: newPublisher(t, topo), batch: 2, at: at}
	start(t, newTestRelay(t, pool, pub, cfg))

	// The first transaction: batch 1 and the prefix of batch 2, marked together.
	first := receive(t, in, size+at)
	eventually(t, "the failure recorded", func() bool {
		var attempts int
		if err := pool.QueryRow(t.Context(), `SELECT attempts FROM outbox WHERE id = $1`, want[size+at]).Scan(&attempts); err != nil {
			t.Fatal(err)
		}
		return attempts == 1
	})
	var txs, marked int
	if err := pool.QueryRow(t.Context(), `SELECT count(DISTINCT xmin::text), count(*) FROM outbox
		WHERE id = ANY($1::uuid[]) AND published_at IS NOT NULL`, want[:size+at]).Scan(&txs, &marked); err != nil {
		t.Fatal(err)
	}
	if txs != 1 || marked != size+at {
		t.Errorf("the first %d rows: %d marked by %d transactions, want all by one", size+at, marked, txs)
	}

	got := append(first, receive(t, in, n-size-at)...)
	for i, d := range got {
		if d.MessageId != want[i] {
			t.Fatalf("message %d is %s, want %s", i, d.MessageId, want[i])
		}
	}
	eventually(t, "all rows marked", func() bool { return countUnpublished(t, pool) == 0 })
	select {
	case d := <-in:
		t.Errorf("a message was sent twice: %s", d.MessageId)
	case <-time.After(200 * time.Millisecond):
	}
}
