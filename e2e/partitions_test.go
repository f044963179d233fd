package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
	"example.com/shop/testkit"
)

// relayRig is an order database, a vhost and any number of real
// `bin/order relay` processes on them.
type relayRig struct {
	t       *testing.T
	dbURL   string
	amqpURL string
	pool    *pgxpool.Pool
	procs   []*system.Process
}

func newRelayRig(t *testing.T) *relayRig {
	t.Helper()
	rig := &relayRig{t: t, dbURL: testkit.EmptyDatabaseURL(t), amqpURL: testkit.NewVhost(t)}
	cmd := exec.CommandContext(testkit.Context(t), filepath.Join(os.Getenv(binDirEnv), "order"), "migrate")
	cmd.Env = append(os.Environ(), "ORDER_DATABASE_URL="+rig.dbURL)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("order migrate: %v\n%s", err, out)
	}
	pool, err := pg.NewPool(testkit.Context(t), rig.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rig.pool = pool
	t.Cleanup(func() {
		stopAndReport(t, func() error {
			for _, p := range rig.procs {
				_ = p.Signal(syscall.SIGCONT)
				_ = p.Stop(10 * time.Second)
			}
			return nil
		}, rig.procs)
	})
	return rig
}

// relay prepares (not starts) a relay process with RELAY_PARTITIONS set
// to partitions and extra KEY=VALUE settings.
func (r *relayRig) relay(name string, partitions int, extra ...string) *system.Process {
	r.t.Helper()
	addr, err := testkit.FreeAddr()
	if err != nil {
		r.t.Fatal(err)
	}
	p := &system.Process{
		Name: name,
		Bin:  filepath.Join(os.Getenv(binDirEnv), "order"),
		Args: []string{"relay"},
		Env: append([]string{
			"ORDER_DATABASE_URL=" + r.dbURL,
			"AMQP_URL=" + r.amqpURL,
			"HTTP_ADDR=" + addr,
			"RELAY_PARTITIONS=" + strconv.Itoa(partitions),
			"RELAY_POLL_INTERVAL=200ms",
		}, extra...),
		Addr: addr,
	}
	r.procs = append(r.procs, p)
	return p
}

func (r *relayRig) start(p *system.Process) {
	r.t.Helper()
	if err := p.Start(); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testkit.Context(r.t), settle)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		r.t.Fatal(err)
	}
}

// led returns the partitions p leads, read from relay_partition_leader.
func led(ctx context.Context, p *system.Process, partitions int) ([]int, error) {
	var out []int
	for n := range partitions {
		v, err := p.Metric(ctx, "relay_partition_leader", map[string]string{"partition": strconv.Itoa(n)})
		if err != nil {
			return nil, err
		}
		if v == 1 {
			out = append(out, n)
		}
	}
	return out, nil
}

// balanced reports whether every partition has exactly one leader among
// procs and each of them leads at least one.
func balanced(ctx context.Context, procs []*system.Process, partitions int) (bool, string) {
	leaders := map[int]int{}
	desc := ""
	for _, p := range procs {
		ps, err := led(ctx, p, partitions)
		if err != nil {
			return false, err.Error()
		}
		desc += fmt.Sprintf("%s:%v ", p.Name, ps)
		if len(ps) == 0 {
			return false, desc
		}
		for _, n := range ps {
			leaders[n]++
		}
	}
	for n := range partitions {
		if leaders[n] != 1 {
			return false, desc
		}
	}
	return true, desc
}

// writeOrderEvent inserts one outbox row for order id, as the order
// service's Writer would (aggregate key = order id).
func writeOrderEvent(ctx context.Context, tx pgx.Tx, name string, id uuid.UUID, version int) error {
	lines := []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}}
	var payload any = contracts.OrderPlaced{OrderID: id, CustomerID: id, Lines: lines, Version: version}
	if name == contracts.EventOrderCancelled {
		payload = contracts.OrderCancelled{OrderID: id, CustomerID: id, Lines: lines, Version: version}
	}
	env, err := contracts.NewEnvelope(name, contracts.ProducerOrder, id.String(), payload, time.Now())
	if err != nil {
		return err
	}
	body, err := json.Marshal(env)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, aggregate_key, key_hash)
		VALUES ($1, $2, $2, $3, $4, $5, $6)`, env.EventID, name, body, env.OccurredAt, id.String(), outbox.KeyHash(id.String()))
	return err
}

// orderStream places n orders and cancels each of them a few transactions
// later, in transactions of chunk orders, calling between(i) before chunk
// i; it returns the events written.
func orderStream(ctx context.Context, pool *pgxpool.Pool, n, chunk int, between func(i int)) (int, error) {
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
	}
	const lag = 3 // chunks between an order's placed and its cancelled
	written := 0
	chunks := (n + chunk - 1) / chunk
	for c := 0; c < chunks+lag; c++ {
		between(c)
		err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
			for i := c * chunk; i < min((c+1)*chunk, n); i++ {
				if err := writeOrderEvent(ctx, tx, contracts.EventOrderPlaced, ids[i], 2); err != nil {
					return err
				}
				written++
			}
			for i := (c - lag) * chunk; c >= lag && i < min((c-lag+1)*chunk, n); i++ {
				if err := writeOrderEvent(ctx, tx, contracts.EventOrderCancelled, ids[i], 3); err != nil {
					return err
				}
				written++
			}
			return nil
		})
		if err != nil {
			return written, err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return written, nil
}

// arrivals consumes queue on amqpURL until the test ends and keeps every
// delivery's order id and event name in arrival order.
type arrivals struct {
	mu   sync.Mutex
	list []arrival
}

type arrival struct {
	id, order, name string
	version         int
}

func collect(t *testing.T, amqpURL, queue string) *arrivals {
	t.Helper()
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		t.Fatal(err)
	}
	in, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &arrivals{}
	go func() {
		for d := range in {
			var env struct {
				Payload struct {
					OrderID string `json:"order_id"`
					Version int    `json:"version"`
				} `json:"payload"`
			}
			_ = json.Unmarshal(d.Body, &env)
			a.mu.Lock()
			a.list = append(a.list, arrival{d.MessageId, env.Payload.OrderID, d.Type, env.Payload.Version})
			a.mu.Unlock()
		}
	}()
	return a
}

// check counts the distinct events received, the duplicates, and the
// orders whose events first arrived out of order: the first copy of an
// event that arrives after the first copy of a later event of the same
// order. Later copies are what at least once means; a consumer's inbox
// skips them (docs/architecture.md, rule 3), so only first arrivals decide
// the order a consumer applies.
func (a *arrivals) check() (distinct, duplicates int, disordered []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := map[string]bool{}
	highest := map[string]int{}
	bad := map[string]bool{}
	for _, m := range a.list {
		if seen[m.id] {
			duplicates++
			continue
		}
		seen[m.id] = true
		if m.version < highest[m.order] && !bad[m.order] {
			bad[m.order] = true
			disordered = append(disordered, fmt.Sprintf("%s: %s v%d first arrived after v%d", m.order, m.name, m.version, highest[m.order]))
		}
		highest[m.order] = max(highest[m.order], m.version)
	}
	return len(seen), duplicates, disordered
}

// Three relays share four partitions. While 2,000 orders are placed and
// then cancelled, one relay is killed with SIGKILL and started again: every
// event is published, every order's placed first reaches the queue before
// its cancelled (copies of the killed relay's unconfirmed batch come again
// later, as duplicates), and within
// 10 s of the restart the partitions are spread again, each relay leading
// at least one.
func TestRelayPartitionsSurviveAKilledRelay(t *testing.T) {
	t.Parallel()
	rig := newRelayRig(t)
	ctx := testkit.Context(t)
	const partitions, orders = 4, 2000
	relays := []*system.Process{rig.relay("relay-a", partitions), rig.relay("relay-b", partitions), rig.relay("relay-c", partitions)}
	for _, p := range relays {
		rig.start(p)
	}
	waitUntil(t, "three relays share four partitions", func() (bool, string) { return balanced(ctx, relays, partitions) })
	got := collect(t, rig.amqpURL, contracts.QueueStock)

	victim := relays[1]
	rebalanced := make(chan time.Duration, 1)
	written, err := orderStream(ctx, rig.pool, orders, 50, func(c int) {
		switch c {
		case 12:
			if err := victim.Kill(); err != nil {
				t.Error(err)
			}
		case 16:
			rig.start(victim)
			go func() {
				start := time.Now()
				for time.Since(start) < settle {
					if ok, _ := balanced(ctx, relays, partitions); ok {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				rebalanced <- time.Since(start)
			}()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if written != 2*orders {
		t.Fatalf("wrote %d events, want %d", written, 2*orders)
	}
	if took := <-rebalanced; took > 10*time.Second {
		t.Errorf("rebalanced %v after the restart, want within 10 s", took.Round(100*time.Millisecond))
	} else {
		t.Logf("each relay led a partition again %v after the restart", took.Round(100*time.Millisecond))
	}
	waitUntil(t, "every row published", func() (bool, string) {
		n := countRows(t, rig.pool, `SELECT count(*) FROM outbox WHERE published_at IS NULL`)
		return n == 0, fmt.Sprintf("%d unpublished", n)
	})
	waitUntil(t, "every event in the queue", func() (bool, string) {
		d, _, _ := got.check()
		return d == 2*orders, fmt.Sprintf("%d of %d", d, 2*orders)
	})
	distinct, dups, disordered := got.check()
	t.Logf("%d events, %d duplicates after the kill", distinct, dups)
	if len(disordered) > 0 {
		t.Fatalf("%d orders out of order, first: %s", len(disordered), disordered[0])
	}
}

// RELAY_PARTITIONS changes from 2 to 4 on a live system, by a rolling
// restart: relays with the new count stand by while one with the old
// count runs, and take over once the last is stopped. Orders keep being
// placed and cancelled all along: every event is published, none out of
// order.
func TestRelayPartitionCountChangesLive(t *testing.T) {
	t.Parallel()
	rig := newRelayRig(t)
	ctx := testkit.Context(t)
	old := []*system.Process{rig.relay("old-1", 2), rig.relay("old-2", 2)}
	nu := []*system.Process{rig.relay("new-1", 4), rig.relay("new-2", 4)}
	for _, p := range old {
		rig.start(p)
	}
	waitUntil(t, "the old relays share two partitions", func() (bool, string) { return balanced(ctx, old, 2) })
	got := collect(t, rig.amqpURL, contracts.QueueStock)

	const orders = 1000
	written, err := orderStream(ctx, rig.pool, orders, 25, func(c int) {
		switch c {
		case 8: // the rolling update: a new one starts, an old one stops, ...
			rig.start(nu[0])
			if ps, err := led(ctx, nu[0], 4); err != nil || len(ps) != 0 {
				t.Errorf("a relay with 4 partitions leads %v (%v) beside relays with 2", ps, err)
			}
			_ = old[0].Stop(10 * time.Second)
		case 16:
			rig.start(nu[1])
			_ = old[1].Stop(10 * time.Second)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the new relays share four partitions", func() (bool, string) { return balanced(ctx, nu, 4) })
	waitUntil(t, "every row published", func() (bool, string) {
		n := countRows(t, rig.pool, `SELECT count(*) FROM outbox WHERE published_at IS NULL`)
		return n == 0, fmt.Sprintf("%d unpublished", n)
	})
	waitUntil(t, "every event in the queue", func() (bool, string) {
		d, _, _ := got.check()
		return d == written, fmt.Sprintf("%d of %d", d, written)
	})
	distinct, dups, disordered := got.check()
	t.Logf("%d events, %d duplicates over the change", distinct, dups)
	if len(disordered) > 0 {
		t.Fatalf("%d orders out of order, first: %s", len(disordered), disordered[0])
	}
}

// waitUntil polls cond every 100 ms for up to settle and returns how long
// it took; cond's text is shown when it never holds.
func waitUntil(t *testing.T, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for {
		ok, desc := cond()
		if ok {
			return time.Since(start)
		}
		last = desc
		if time.Since(start) > settle {
			t.Fatalf("not within %v: %s (%s)", settle, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func countRows(t *testing.T, pool *pgxpool.Pool, query string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(testkit.Context(t), query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
