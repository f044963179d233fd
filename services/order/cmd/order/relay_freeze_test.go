package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/order/migrations"
	"example.com/shop/testkit"
)

// childRelayEnv makes the test binary run `order relay` instead of the
// tests, so a test can freeze a real relay process.
const childRelayEnv = "ORDER_TEST_CHILD_RELAY"

func TestMain(m *testing.M) {
	if os.Getenv(childRelayEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, []string{"order", "relay"}, os.Getenv, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startChildRelay starts `order relay` with vars in a child process and
// returns it, the base URL of its HTTP server, its logs and a channel closed
// when it has exited; the test's end wakes it (SIGCONT) and stops it
// (SIGTERM).
func startChildRelay(t *testing.T, vars map[string]string) (*exec.Cmd, string, *relayLogs, <-chan struct{}) {
	t.Helper()
	logs := &relayLogs{addr: make(chan string, 1)}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childRelayEnv+"=1")
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("the child relay did not stop on SIGTERM:\n%s", logs)
		}
	})
	select {
	case addr := <-logs.addr:
		return cmd, "http://" + addr, logs, exited
	case <-exited:
		t.Fatalf("child relay ended: %v\n%s", waitErr, logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("child relay did not listen:\n%s", logs)
	}
	return nil, "", nil, nil
}

// metricValue reads one unlabelled sample from a /metrics page; -1 while
// the page does not show it yet.
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	_, body := httpGet(t, base+"/metrics")
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

func unpublished(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A leader frozen with SIGSTOP loses its lock once its lock session idles
// out (RELAY_LOCK_TIMEOUT, default 5 s): a standby takes over within 10 s.
// Woken with SIGCONT, the old leader finds its lock gone and steps down
// without publishing anything more.
func TestRelayStandbyTakesOverFromAFrozenLeader(t *testing.T) {
	t.Parallel()
	pool, dbURL := testkit.NewDatabase(t, migrations.Schema)
	amqpURL := testkit.NewVhost(t)
	vars := map[string]string{
		"ORDER_DATABASE_URL":  dbURL,
		"AMQP_URL":            amqpURL,
		"HTTP_ADDR":           "127.0.0.1:0",
		"RELAY_POLL_INTERVAL": "50ms",
		"LOG_LEVEL":           "debug",
	}

	// The leader: a child process running `order relay` with the default
	// lock settings.
	cmd, leader, _, _ := startChildRelay(t, vars)
	waitFor(t, "the child leads", 30*time.Second, func() bool { return metricValue(t, leader, "relay_leader") == 1 })
	insertOutboxRow(t, pool, time.Time{})
	waitFor(t, "the leader publishes", 30*time.Second, func() bool { return unpublished(t, pool) == 0 })

	// The standby, in this process.
	standby, standbyLogs, _ := startRelay(t, vars)
	waitFor(t, "the standby joins, leading nothing", 30*time.Second, func() bool {
		return strings.Contains(standbyLogs.String(), "outbox relay joined")
	})
	time.Sleep(300 * time.Millisecond) // a few rounds: the only partition stays with the leader
	if v := metricValue(t, standby, "relay_leader"); v != 0 {
		t.Fatalf("the standby leads (relay_leader %v) beside a live leader", v)
	}

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	took := waitFor(t, "the standby takes over from the frozen leader", 10*time.Second, func() bool {
		return metricValue(t, standby, "relay_leader") == 1
	})
	t.Logf("the standby led %v after the leader froze", took.Round(10*time.Millisecond))
	for range 20 {
		insertOutboxRow(t, pool, time.Time{})
	}
	waitFor(t, "the new leader publishes", 30*time.Second, func() bool { return unpublished(t, pool) == 0 })

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the woken leader steps down", 30*time.Second, func() bool {
		return metricValue(t, leader, "relay_leader") == 0
	})
	for range 20 {
		insertOutboxRow(t, pool, time.Time{})
	}
	waitFor(t, "the standby publishes the rest", 30*time.Second, func() bool { return unpublished(t, pool) == 0 })
	if v := metricValue(t, leader, "relay_published_total"); v != 1 {
		t.Fatalf("the woken leader published %v rows in all, want only the first", v)
	}
	if v := metricValue(t, standby, "relay_published_total"); v != 40 {
		t.Fatalf("the standby published %v rows, want 40", v)
	}
}

// A leader frozen (SIGSTOP) in the middle of a batch, with its batch's
// transaction open, is replaced: the new leader waits until that
// transaction ends (the partition's batch lock), then publishes
// everything. Woken up (SIGCONT) after that, the old leader sends at most
// the one message it was writing, not the rest of its batch: the batch's
// publishing deadline has passed. Every order's placed first reaches the
// queue before its cancelled.
func TestRelayFrozenMidBatchSendsNothingAfterTheNewLeaderTookOver(t *testing.T) {
	t.Parallel()
	pool, dbURL := testkit.NewDatabase(t, migrations.Schema)
	amqpURL := testkit.NewVhost(t)
	vars := map[string]string{
		"ORDER_DATABASE_URL": dbURL,
		// A long heartbeat: the broker keeps the frozen leader's connection,
		// so that, woken up, it could still send.
		"AMQP_URL":            amqpURL + "?heartbeat=300",
		"HTTP_ADDR":           "127.0.0.1:0",
		"RELAY_POLL_INTERVAL": "50ms",
		"RELAY_BATCH_SIZE":    "2000",
	}
	cmd, leader, _, _ := startChildRelay(t, vars)
	waitFor(t, "the child leads", 30*time.Second, func() bool { return metricValue(t, leader, "relay_leader") == 1 })
	got := collectOrders(t, amqpURL)

	// 2,000 orders, each placed and cancelled 2,000 events later.
	const orders = 2000
	rows := make([][]any, 0, 2*orders)
	ids := make([]uuid.UUID, orders)
	base := time.Now().Add(-time.Minute)
	for i := range 2 * orders {
		name, version := contracts.EventOrderPlaced, 2
		if i >= orders {
			name, version = contracts.EventOrderCancelled, 3
		}
		o := i % orders
		if i < orders {
			ids[o] = uuid.New()
		}
		lines := []contracts.OrderLine{{ProductID: ids[o], Quantity: "1.000"}}
		var payload any = contracts.OrderPlaced{OrderID: ids[o], CustomerID: ids[o], Lines: lines, Version: version}
		if version == 3 {
			payload = contracts.OrderCancelled{OrderID: ids[o], CustomerID: ids[o], Lines: lines, Version: version}
		}
		e, err := contracts.NewEnvelope(name, contracts.ProducerOrder, "c", payload, base.Add(time.Duration(i)*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		body, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, []any{e.EventID, name, name, string(body), e.OccurredAt, ids[o].String(), outbox.KeyHash(ids[o].String())})
	}
	if _, err := pool.CopyFrom(t.Context(), pgx.Identifier{"outbox"},
		[]string{"id", "event_name", "routing_key", "envelope", "occurred_at", "aggregate_key", "key_hash"}, pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}

	// Freeze the leader in the middle of sending its first batch: its
	// transaction is open and part of the batch has reached the queue.
	openBatch := func() bool {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	waitFor(t, "the first messages arrive", 60*time.Second, func() bool { return got.len() >= 50 })
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	sent := got.len()
	// A statement of the transaction may be running when the process stops
	// (the relay selects and marks while the broker confirms): the session
	// is idle in its transaction once the server has answered it.
	deadline := time.Now().Add(2 * time.Second)
	for !openBatch() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !openBatch() || unpublished(t, pool) != 2*orders {
		t.Fatal("the leader froze after its first transaction, not in it")
	}
	t.Logf("frozen in its first batch of 2000, %d messages of it in the queue so far", sent)
	left := unpublished(t, pool)

	standby, standbyLogs, _ := startRelay(t, vars)
	waitFor(t, "the standby leads", 30*time.Second, func() bool { return metricValue(t, standby, "relay_leader") == 1 })
	// The old batch's transaction still holds the partition's batch lock:
	// the new leader publishes nothing yet.
	time.Sleep(time.Second)
	if n := unpublished(t, pool); n != left {
		t.Fatalf("the new leader published %d rows while the old batch was open", left-n)
	}
	// End it now, as idle_in_transaction_session_timeout would 25 s after
	// it went idle.
	if _, err := pool.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND state LIKE 'idle in transaction%'`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new leader publishes everything", 90*time.Second, func() bool { return unpublished(t, pool) == 0 })
	if !strings.Contains(standbyLogs.String(), `"level":"INFO","msg":"outbox relay leads a partition"`) {
		t.Fatalf("no leader log line:\n%s", standbyLogs)
	}
	quiet := func() int {
		for {
			n := got.len()
			time.Sleep(time.Second)
			if got.len() == n {
				return n
			}
		}
	}
	before := quiet()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the woken leader steps down", 30*time.Second, func() bool { return metricValue(t, leader, "relay_leader") == 0 })
	after := quiet()
	// The deadline is read before each message: a message that had passed
	// that check when the process froze still goes out when it wakes (a
	// duplicate, which the inbox skips; its order's first copy arrived long
	// before). Anything more would be the rest of the batch.
	if late := after - before; late > 1 {
		t.Errorf("the woken leader sent %d more messages after the new leader had published everything, want at most the one it was writing", late)
	} else if late == 1 {
		t.Log("the woken leader finished writing the one message it had started")
	}
	distinct, dups, disordered := got.check()
	t.Logf("%d events, %d duplicates (the frozen batch's sent part, published again)", distinct, dups)
	if distinct != 2*orders {
		t.Fatalf("%d distinct events in the queue, want %d", distinct, 2*orders)
	}
	if len(disordered) > 0 {
		t.Fatalf("%d orders out of order, first: %s", len(disordered), disordered[0])
	}
}

// orderArrivals are the deliveries of stock.events in arrival order.
type orderArrivals struct {
	mu   sync.Mutex
	list []struct {
		id, order string
		version   int
	}
}

func collectOrders(t *testing.T, amqpURL string) *orderArrivals {
	t.Helper()
	ch := brokerChannel(t, amqpURL)
	// The relay declares the queue; wait for it.
	waitFor(t, "the relay declares stock.events", 30*time.Second, func() bool {
		_, err := ch.QueueDeclarePassive(contracts.QueueStock, true, false, false, false, nil)
		if err != nil {
			ch = brokerChannel(t, amqpURL)
		}
		return err == nil
	})
	if err := ch.Qos(1000, 0, false); err != nil {
		t.Fatal(err)
	}
	in, err := ch.Consume(contracts.QueueStock, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &orderArrivals{}
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
			a.list = append(a.list, struct {
				id, order string
				version   int
			}{d.MessageId, env.Payload.OrderID, env.Payload.Version})
			a.mu.Unlock()
		}
	}()
	return a
}

func (a *orderArrivals) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.list)
}

// check counts distinct events and duplicates, and names the orders whose
// events first arrived out of version order (later copies of an event are
// duplicates a consumer's inbox skips).
func (a *orderArrivals) check() (distinct, duplicates int, disordered []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := map[string]bool{}
	highest := map[string]int{}
	for _, m := range a.list {
		if seen[m.id] {
			duplicates++
			continue
		}
		seen[m.id] = true
		if m.version < highest[m.order] {
			disordered = append(disordered, fmt.Sprintf("%s: v%d first arrived after v%d", m.order, m.version, highest[m.order]))
		}
		highest[m.order] = max(highest[m.order], m.version)
	}
	return len(seen), duplicates, disordered
}
