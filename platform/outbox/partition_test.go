package outbox

import (
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
)

// insertKeyed writes one outbox row of aggregate key with the correlation
// id "key/seq", as the Writer would, and returns its id.
func insertKeyed(t testing.TB, ctx context.Context, db execer, key string, seq int) string {
	t.Helper()
	env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, key+"/"+strconv.Itoa(seq), contracts.OrderPlaced{
		OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2,
		Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "2.000"}},
	}, time.Now())
	if err != nil {
		t.Fatalf("new envelope: %v", err)
	}
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, aggregate_key, key_hash)
		VALUES ($1, $2, $2, $3, $4, $5, $6)`, env.EventID, env.EventName, body, env.OccurredAt, key, KeyHash(key)); err != nil {
		t.Errorf("insert outbox row: %v", err)
	}
	return env.EventID.String()
}

// checkKeyOrder fails unless, for every key, the first arrival of each
// sequence number comes in increasing order; it returns the number of
// distinct events seen.
func checkKeyOrder(t testing.TB, got []amqp091.Delivery) int {
	t.Helper()
	next := map[string]int{}
	seen := map[string]bool{}
	for _, d := range got {
		if seen[d.MessageId] {
			continue // a duplicate of an event that already arrived
		}
		seen[d.MessageId] = true
		var env contracts.Envelope
		if err := json.Unmarshal(d.Body, &env); err != nil {
			t.Fatalf("body of %s: %v", d.MessageId, err)
		}
		key, seqText, _ := strings.Cut(env.CorrelationID, "/")
		seq, err := strconv.Atoi(seqText)
		if err != nil {
			t.Fatalf("correlation id %q", env.CorrelationID)
		}
		if seq != next[key] {
			t.Fatalf("key %s: event %d arrived first, want %d", key, seq, next[key])
		}
		next[key]++
	}
	return len(seen)
}

func partitionsOf(rs ...testRelay) [][]int {
	out := make([][]int, len(rs))
	for i, r := range rs {
		out[i] = r.Partitions()
	}
	return out
}

// Three relays share eight partitions, each leading two or three, exactly
// one leader per partition, and every key's events arrive in order while
// they all publish at once.
func TestRelaysSharePartitionsAndKeepEachKeyInOrder(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	cfg := fastConfig()
	cfg.Partitions = 8
	cfg.BatchSize = 20
	var rs []testRelay
	for range 3 {
		r := newTestRelay(t, pool, newPublisher(t, topo), cfg)
		start(t, r)
		rs = append(rs, r)
	}
	eventually(t, "every partition led, 2 or 3 each", func() bool {
		held := map[int]int{}
		for _, ps := range partitionsOf(rs...) {
			if len(ps) < 2 || len(ps) > 3 {
				return false
			}
			for _, p := range ps {
				held[p]++
			}
		}
		return len(held) == 8
	})
	for _, r := range rs {
		var sum float64
		for p := range 8 {
			sum += testutil.ToFloat64(r.m.partLeader.WithLabelValues(strconv.Itoa(p)))
		}
		if int(sum) != len(r.Partitions()) || testutil.ToFloat64(r.m.leader) != 1 {
			t.Fatalf("relay_partition_leader sums to %v, leads %v", sum, r.Partitions())
		}
	}

	const keys, perKey = 40, 25
	var wg sync.WaitGroup
	for range keys {
		wg.Go(func() {
			key := uuid.NewString()
			for i := range perKey {
				insertKeyed(t, t.Context(), pool, key, i)
			}
		})
	}
	wg.Wait()
	got := receive(t, in, keys*perKey)
	got = append(got, drain(in, 300*time.Millisecond)...)
	if n := checkKeyOrder(t, got); n != keys*perKey {
		t.Fatalf("%d distinct events, want %d", n, keys*perKey)
	}
	eventually(t, "all rows marked", func() bool { return countUnpublished(t, pool) == 0 })
	published := 0.0
	for _, r := range rs {
		published += testutil.ToFloat64(r.m.published)
	}
	if published != keys*perKey {
		t.Fatalf("relay_published_total sums to %v", published)
	}
}

// A relay leading every partition gives half back when a second one
// starts, and takes them all again when the second one stops.
func TestRelayGivesPartitionsBackAndTakesADeadRelaysPartitions(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	cfg := fastConfig()
	cfg.Partitions = 4
	a := newTestRelay(t, pool, newPublisher(t, topo), cfg)
	start(t, a)
	eventually(t, "a leads all four", func() bool { return len(a.Partitions()) == 4 })

	b := newTestRelay(t, pool, newPublisher(t, topo), cfg)
	stopB := start(t, b)
	eventually(t, "two each", func() bool { return len(a.Partitions()) == 2 && len(b.Partitions()) == 2 })
	if ps := append(a.Partitions(), b.Partitions()...); len(ps) != 4 {
		t.Fatalf("partitions %v", partitionsOf(a, b))
	}
	stopB()
	begin := time.Now()
	eventually(t, "a leads all four again", func() bool { return len(a.Partitions()) == 4 })
	t.Logf("a took b's partitions %v after b stopped", time.Since(begin).Round(10*time.Millisecond))
	if v := testutil.ToFloat64(b.m.partLeader.WithLabelValues("0")) + testutil.ToFloat64(b.m.partLeader.WithLabelValues("3")); v != 0 {
		t.Fatalf("a stopped relay still shows relay_partition_leader %v", v)
	}
}

// While another transaction holds a partition's batch lock (the batch of a
// former leader that is still open), the new leader publishes nothing of
// that partition; the other partitions go on; once it ends, the partition
// is published, in order.
func TestRelayWaitsForAnOpenBatchOfItsPartition(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	cfg := fastConfig()
	cfg.Partitions = 2
	k := newLockKeys(DefaultLockKey, 2)

	// Two keys, one in each partition.
	var keyIn [2]string
	for keyIn[0] == "" || keyIn[1] == "" {
		key := uuid.NewString()
		keyIn[KeyHash(key)%2] = key
	}
	old, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Rollback(context.Background()) }()
	if _, err := old.Exec(t.Context(), `SELECT pg_advisory_xact_lock($1::int, 0)`, k.batch); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		insertKeyed(t, t.Context(), pool, keyIn[0], i)
		insertKeyed(t, t.Context(), pool, keyIn[1], i)
	}
	r := newTestRelay(t, pool, newPublisher(t, topo), cfg)
	start(t, r)
	got := receive(t, in, 5)
	got = append(got, drain(in, 500*time.Millisecond)...)
	for _, d := range got {
		var env contracts.Envelope
		if err := json.Unmarshal(d.Body, &env); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(env.CorrelationID, keyIn[1]) {
			t.Fatalf("published %s of partition 0 while its batch lock was held", env.CorrelationID)
		}
	}
	if len(got) != 5 {
		t.Fatalf("%d messages of partition 1, want 5", len(got))
	}
	if err := old.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	got = append(got, receive(t, in, 5)...)
	if n := checkKeyOrder(t, got); n != 10 {
		t.Fatalf("%d distinct events, want 10", n)
	}
}

// A relay configured with another partition count stands by while relays
// with the old count run, and takes over, in order,
// once they are gone: RELAY_PARTITIONS changes without a stop of the
// order service and without reordering.
func TestRelayWithAnotherPartitionCountWaitsForTheOldOnes(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	two := fastConfig()
	two.Partitions = 2
	four := fastConfig()
	four.Partitions = 4
	old := newTestRelay(t, pool, newPublisher(t, topo), two)
	stopOld := start(t, old)
	eventually(t, "the old relay leads", func() bool { return len(old.Partitions()) == 2 })

	keys := make([]string, 20)
	for i := range keys {
		keys[i] = uuid.NewString()
	}
	writing, stopWriting := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	written := 0
	wg.Go(func() {
		for seq := 0; writing.Err() == nil; seq++ {
			for _, k := range keys {
				insertKeyed(t, context.Background(), pool, k, seq)
			}
			written += len(keys)
			time.Sleep(5 * time.Millisecond)
		}
	})

	nu := newTestRelay(t, pool, newPublisher(t, topo), four)
	start(t, nu)
	time.Sleep(500 * time.Millisecond)
	if ps := nu.Partitions(); len(ps) != 0 {
		t.Fatalf("the relay with 4 partitions leads %v beside one with 2", ps)
	}
	stopOld()
	eventually(t, "the new relay leads all four", func() bool { return len(nu.Partitions()) == 4 })
	time.Sleep(300 * time.Millisecond)
	stopWriting()
	wg.Wait()
	eventually(t, "all rows marked", func() bool { return countUnpublished(t, pool) == 0 })
	got := drain(in, 500*time.Millisecond)
	if n := checkKeyOrder(t, got); n != written {
		t.Fatalf("%d distinct events, want %d", n, written)
	}
	t.Logf("%d events over the change, %d deliveries", written, len(got))
}

// A relay with another partition count takes over from a leader frozen in
// the middle of its batches, once the frozen leader's lock session has
// ended (as idle_session_timeout ends it, RelayConfig.LockTimeout after the
// freeze): it leads every partition while the frozen batches' transactions
// are still open, publishes nothing until they end (as
// idle_in_transaction_session_timeout ends them), then everything, each
// key in order; the frozen leader, woken up, stands by.
func TestRelayWithAnotherPartitionCountTakesOverFromAFrozenLeader(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	// Ten keys, five in each partition of two.
	const keys, perKey = 10, 10
	var names []string
	for n := [2]int{}; len(names) < keys; {
		key := uuid.NewString()
		if p := KeyHash(key) % 2; n[p] < keys/2 {
			n[p]++
			names = append(names, key)
		}
	}
	for seq := range perKey {
		for _, key := range names {
			insertKeyed(t, t.Context(), pool, key, seq)
		}
	}

	// The old leader, with 2 partitions, freezes once the broker confirmed
	// its first batch; the other partition's batch waits for the publisher,
	// which they share. Both batches' transactions stay open.
	two := fastConfig()
	two.Partitions = 2
	two.BatchSize = 10
	thaw := make(chan struct{})
	var frozen atomic.Int32
	pub := &hookedPublisher{Publisher: newPublisher(t, topo), after: func(int) {
		frozen.Add(1)
		<-thaw
	}}
	old := newTestRelay(t, pool, pub, two)
	start(t, old)
	var thawOnce sync.Once
	t.Cleanup(func() { thawOnce.Do(func() { close(thaw) }) })
	eventually(t, "the old leader freezes", func() bool { return frozen.Load() == 1 })
	got := drain(in, 500*time.Millisecond) // what it sent before it froze
	if len(got) < two.BatchSize {
		t.Fatalf("%d messages sent before the freeze, want %d at least", len(got), two.BatchSize)
	}
	// Events of other keys that committed late, with older timestamps: the
	// oldest unpublished rows of the new partitions are free to take.
	const late = 8
	lateKeys := make([]string, late)
	for i := range lateKeys {
		lateKeys[i] = uuid.NewString()
		insertKeyed(t, t.Context(), pool, lateKeys[i], 0)
	}
	if _, err := pool.Exec(t.Context(), `UPDATE outbox SET occurred_at = occurred_at - interval '1 hour'
		WHERE aggregate_key = ANY($1)`, lateKeys); err != nil {
		t.Fatal(err)
	}
	const total = keys*perKey + late

	four := fastConfig()
	four.Partitions = 4
	nu := newTestRelay(t, pool, newPublisher(t, topo), four)
	start(t, nu)
	time.Sleep(300 * time.Millisecond)
	if ps := nu.Partitions(); len(ps) != 0 {
		t.Fatalf("the relay with 4 partitions leads %v beside a live one with 2", ps)
	}

	// The frozen leader's lock session ends.
	ok := false
	if err := pool.QueryRow(t.Context(), `SELECT bool_and(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::bigint::oid AND objid = 2
		AND database = `+currentDB, int64(old.keys.member)).Scan(&ok); err != nil || !ok {
		t.Fatalf("end the old leader's lock session: %v %v", ok, err)
	}
	ended := time.Now()
	for len(nu.Partitions()) != 4 {
		if time.Since(ended) > 10*time.Second {
			t.Fatalf("the relay with 4 partitions leads %v 10 s after the frozen one's lock session ended (LockRetry %v)",
				nu.Partitions(), four.LockRetry)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the relay with 4 partitions led them all %v after the frozen one's lock session ended",
		time.Since(ended).Round(time.Millisecond))

	// While the frozen batches are open it publishes nothing.
	if early := drain(in, 500*time.Millisecond); len(early) != 0 || countUnpublished(t, pool) != total {
		t.Fatalf("%d messages sent, %d rows marked while the frozen leader's batches were open",
			len(early), total-countUnpublished(t, pool))
	}
	if err := pool.QueryRow(t.Context(), `SELECT bool_and(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::bigint::oid AND objid = 2
		AND database = `+currentDB, int64(old.keys.fence)).Scan(&ok); err != nil || !ok {
		t.Fatalf("end the frozen leader's batch transactions: %v %v", ok, err)
	}
	eventually(t, "all rows marked", func() bool { return countUnpublished(t, pool) == 0 })
	thawOnce.Do(func() { close(thaw) })
	got = append(got, drain(in, 500*time.Millisecond)...)
	if n := checkKeyOrder(t, got); n != total {
		t.Fatalf("%d distinct events, want %d", n, total)
	}
	if ps := old.Partitions(); len(ps) != 0 || testutil.ToFloat64(old.m.published) != 0 {
		t.Fatalf("the woken leader leads %v and marked %v rows", ps, testutil.ToFloat64(old.m.published))
	}
}

func TestPlanConvergesToAnEvenShare(t *testing.T) {
	t.Parallel()
	view := func(counts map[uint32]int) lockView {
		v := lockView{counts: counts}
		for pid := range counts {
			v.members = append(v.members, pid)
		}
		return v
	}
	for _, c := range []struct {
		name     string
		counts   map[uint32]int
		me       uint32
		mine     []int
		giveBack []int
		take     int
	}{
		{"alone takes all", map[uint32]int{1: 0}, 1, nil, nil, 8},
		{"over the share gives back", map[uint32]int{1: 8, 2: 0}, 1, []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{4, 5, 6, 7}, 0},
		{"idle newcomer takes up to the share", map[uint32]int{1: 4, 2: 0}, 2, nil, nil, 4},
		{"2,2,0 of four: the lowest busy pid gives one", map[uint32]int{1: 2, 2: 2, 3: 0}, 1, []int{0, 1}, []int{1}, 0},
		{"2,2,0 of four: the other waits", map[uint32]int{1: 2, 2: 2, 3: 0}, 2, []int{2, 3}, nil, 0},
		{"2,1,0 of four with one free: the idlest takes", map[uint32]int{1: 2, 2: 1, 3: 0}, 3, nil, nil, 2},
		{"2,1,0: the middle waits", map[uint32]int{1: 2, 2: 1, 3: 0}, 2, []int{2}, nil, 0},
		{"balanced stays", map[uint32]int{1: 2, 2: 1, 3: 1}, 1, []int{0, 1}, nil, 0},
	} {
		partitions := 4
		if c.name == "alone takes all" || strings.HasPrefix(c.name, "over") || strings.HasPrefix(c.name, "idle") {
			partitions = 8
		}
		g, take := plan(view(c.counts), c.me, c.mine, partitions)
		if !reflect.DeepEqual(g, c.giveBack) || take != c.take {
			t.Errorf("%s: gives back %v and takes %d, want %v and %d", c.name, g, take, c.giveBack, c.take)
		}
	}
}
