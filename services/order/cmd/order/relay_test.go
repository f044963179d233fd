package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/services/order/migrations"
	"example.com/shop/testkit"
)

// relayLogs collects the JSON logs of `order relay` and reports the address
// of its "http server listening" line.
type relayLogs struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	addr chan string
}

func (l *relayLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for line := range bytes.Lines(p) {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "http server listening" {
			select {
			case l.addr <- rec.Addr:
			default:
			}
		}
	}
	return len(p), nil
}

func (l *relayLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// insertOutboxRow writes one order.order.placed.v1 event the way the
// order store does and returns its id.
func insertOutboxRow(t *testing.T, pool *pgxpool.Pool, published time.Time) string {
	t.Helper()
	env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, "corr", contracts.OrderPlaced{
		OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2,
		Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	var pub *time.Time
	if !published.IsZero() {
		pub = &published
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
		VALUES ($1, $2, $2, $3, $4, $5)`, env.EventID, env.EventName, string(body), env.OccurredAt, pub); err != nil {
		t.Fatal(err)
	}
	return env.EventID.String()
}

// brokerChannel opens a channel on its own connection to amqpURL, closed
// when the test ends.
func brokerChannel(t *testing.T, amqpURL string) *amqp091.Channel {
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
	return ch
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startRelay runs `order relay` in this process with vars and returns the
// base URL of its HTTP server, its logs, and stop, which ends it and returns
// what run returned (a relay that does not stop within 30 s fails the test).
// stop is also called when the test ends.
func startRelay(t *testing.T, vars map[string]string) (string, *relayLogs, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &relayLogs{addr: make(chan string, 1)}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"order", "relay"}, env(vars), io.Discard, logs) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("relay did not stop within 30 s:\n%s", logs)
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	select {
	case addr := <-logs.addr:
		return "http://" + addr, logs, stop
	case err := <-done:
		t.Fatalf("relay ended: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("relay did not listen:\n%s", logs)
	}
	return "", nil, nil
}

func TestRelayCommandPublishesAndServesMetrics(t *testing.T) {
	t.Parallel()
	pool, dbURL := testkit.NewDatabase(t, migrations.Schema)
	amqpURL := testkit.NewVhost(t)
	id := insertOutboxRow(t, pool, time.Time{})
	base, logs, stop := startRelay(t, map[string]string{
		"ORDER_DATABASE_URL":  dbURL,
		"AMQP_URL":            amqpURL,
		"HTTP_ADDR":           "127.0.0.1:0",
		"RELAY_POLL_INTERVAL": "50ms",
		"LOG_LEVEL":           "debug",
	})

	// Ready once the broker connection has declared the topology.
	end := time.Now().Add(30 * time.Second)
	for {
		code, _ := httpGet(t, base+"/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("/readyz stays %d:\n%s", code, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}

	ch := brokerChannel(t, amqpURL)
	var d amqp091.Delivery
	for end := time.Now().Add(30 * time.Second); ; {
		var ok bool
		var err error
		d, ok, err = ch.Get(contracts.QueueStock, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no message in %s:\n%s", contracts.QueueStock, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d.MessageId != id || d.Type != contracts.EventOrderPlaced || d.Exchange != contracts.Exchange {
		t.Fatalf("got message %q type %q from exchange %q", d.MessageId, d.Type, d.Exchange)
	}

	for end := time.Now().Add(30 * time.Second); ; {
		_, body := httpGet(t, base+"/metrics")
		if strings.Contains(body, "relay_published_total 1") && strings.Contains(body, "relay_leader 1") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("metrics do not show the published row:\n%s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := stop(); err != nil {
		t.Fatalf("relay: %v\n%s", err, logs)
	}
	var published bool
	if err := pool.QueryRow(t.Context(), `SELECT published_at IS NOT NULL FROM outbox WHERE id = $1`, id).Scan(&published); err != nil || !published {
		t.Fatalf("row marked %v, err %v", published, err)
	}
}

// TestRelayCommandWaitsForTheDatabase: with the database unreachable the relay
// listens, answers /healthz, reports itself not ready and stops cleanly when its
// context ends while it still waits.
func TestRelayCommandWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &relayLogs{addr: make(chan string, 1)}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"order", "relay"}, env(map[string]string{
			"ORDER_DATABASE_URL": "postgres://postgres:secret@127.0.0.1:1/orders?sslmode=disable",
			"AMQP_URL":           "amqp://guest:guest@127.0.0.1:1/",
			"HTTP_ADDR":          "127.0.0.1:0",
		}), io.Discard, logs)
	}()
	var base string
	select {
	case addr := <-logs.addr:
		base = "http://" + addr
	case err := <-done:
		t.Fatalf("relay ended: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("relay did not listen:\n%s", logs)
	}
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz = %d %s, want 200", code, body)
	}
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "postgres") {
		t.Errorf("GET /readyz = %d %s, want 503 naming postgres", code, body)
	}
	// The first failed attempt is logged before the stop, so the stop hits the wait.
	for end := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), `"level":"WARN","msg":"database not answering, retrying"`); {
		if time.Now().After(end) {
			t.Fatalf("no WARN line for the database:\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("relay returned %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("relay did not stop within 10 s of cancel:\n%s", logs)
	}
	if l := logs.String(); strings.Contains(l, "secret") {
		t.Errorf("the logs show the database password:\n%s", l)
	}
}

func TestRelayCommandRejectsBadSettings(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"order", "relay"}, env(map[string]string{
		"RELAY_PARTITIONS":    "many",
		"RELAY_BATCH_SIZE":    "0",
		"RELAY_POLL_INTERVAL": "soon",
		"RELAY_LOCK_TIMEOUT":  "-1s",
		"RELAY_LOCK_RETRY":    "0s",
		"RELAY_MAX_BACKOFF":   "often",
		"RELAY_STALL_TIMEOUT": "1",
	}), io.Discard, io.Discard)
	for _, v := range []string{"RELAY_PARTITIONS", "RELAY_BATCH_SIZE", "RELAY_POLL_INTERVAL", "RELAY_LOCK_TIMEOUT",
		"RELAY_LOCK_RETRY", "RELAY_MAX_BACKOFF", "RELAY_STALL_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Fatalf("error %v does not name %s", err, v)
		}
	}
	err = run(t.Context(), []string{"order", "relay"}, env(map[string]string{"RELAY_PARTITIONS": "1025"}), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "RELAY_PARTITIONS") {
		t.Fatalf("1025 partitions: error %v", err)
	}
	err = run(t.Context(), []string{"order", "relay"}, env(map[string]string{
		"RELAY_LOCK_TIMEOUT": "2s", "RELAY_LOCK_KEEPALIVE": "1500ms",
	}), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "RELAY_LOCK_KEEPALIVE") {
		t.Fatalf("a keepalive over half the lock timeout: error %v", err)
	}
	if err := run(t.Context(), []string{"order", "relay", "extra"}, env(nil), io.Discard, io.Discard); err == nil {
		t.Fatal("relay accepted an argument")
	}
}

func TestPurgeOutboxCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{}, {"--older-than", "0s"}, {"--older-than", "-1h"}, {"--older-than", "soon"}} {
		err := run(t.Context(), append([]string{"order", "purge-outbox"}, args...), env(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "older-than") {
			t.Fatalf("purge-outbox %v: error %v", args, err)
		}
	}

	pool, dbURL := testkit.NewDatabase(t, migrations.Schema)
	for _, c := range []struct{ olderThan, horizon string }{{"2m", ""}, {"167h", ""}, {"1h", "2h"}} {
		err := run(t.Context(), []string{"order", "purge-outbox", "--older-than", c.olderThan},
			env(map[string]string{"ORDER_DATABASE_URL": dbURL, "OUTBOX_REPLAY_HORIZON": c.horizon}), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "shorter than OUTBOX_REPLAY_HORIZON") {
			t.Fatalf("purge-outbox --older-than %s (horizon %q): error %v", c.olderThan, c.horizon, err)
		}
	}
	old := insertOutboxRow(t, pool, time.Now().Add(-8*24*time.Hour))
	recent := insertOutboxRow(t, pool, time.Now().Add(-time.Hour))
	pending := insertOutboxRow(t, pool, time.Time{})
	if _, err := pool.Exec(t.Context(), `INSERT INTO processed_event (consumer, message_key, processed_at) VALUES
		('order-api', 'old', now() - interval '8 days'), ('order-api', 'recent', now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"order", "purge-outbox", "--older-than", "168h"},
		env(map[string]string{"ORDER_DATABASE_URL": dbURL}), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "purged 1 outbox rows") || !strings.Contains(out.String(), "purged 1 idempotency keys") {
		t.Fatalf("output %q", out.String())
	}
	var key string
	if err := pool.QueryRow(t.Context(), `SELECT string_agg(message_key, ',') FROM processed_event`).Scan(&key); err != nil || key != "recent" {
		t.Fatalf("idempotency keys left: %q (%v), want recent", key, err)
	}
	rows, err := pool.Query(t.Context(), `SELECT id::text FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left[id] = true
	}
	if left[old] || !left[recent] || !left[pending] || len(left) != 2 {
		t.Fatalf("rows left %v (old %s, recent %s, pending %s)", left, old, recent, pending)
	}
}

// While the broker refuses the relay's messages (a bound queue full with
// reject-publish), /readyz answers 503 naming the publishing check once
// RELAY_STALL_TIMEOUT has passed, and 200 again once the row is published.
func TestRelayCommandReadyzReportsALeaderThatCannotPublish(t *testing.T) {
	t.Parallel()
	pool, dbURL := testkit.NewDatabase(t, migrations.Schema)
	amqpURL := testkit.NewVhost(t)
	base, logs, stop := startRelay(t, map[string]string{
		"ORDER_DATABASE_URL":  dbURL,
		"AMQP_URL":            amqpURL,
		"HTTP_ADDR":           "127.0.0.1:0",
		"RELAY_POLL_INTERVAL": "50ms",
		"RELAY_MAX_BACKOFF":   "200ms",
		"RELAY_STALL_TIMEOUT": "500ms",
	})
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	waitFor(t, "ready", 30*time.Second, func() bool { code, _ := httpGet(t, base+"/readyz"); return code == http.StatusOK })

	ch := brokerChannel(t, amqpURL)
	const q = "test.refusing"
	if _, err := ch.QueueDeclare(q, false, false, false, false, amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q, contracts.EventOrderPlaced, contracts.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(t.Context(), "", q, false, false, amqp091.Publishing{Body: []byte("filler")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refusing queue is full", 30*time.Second, func() bool {
		st, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
		return err == nil && st.Messages == 1
	})
	id := insertOutboxRow(t, pool, time.Time{})
	waitFor(t, "/readyz reports the relay", 30*time.Second, func() bool {
		code, body := httpGet(t, base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "publishing")
	})
	if _, err := ch.QueuePurge(q, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ready again", 30*time.Second, func() bool { code, _ := httpGet(t, base+"/readyz"); return code == http.StatusOK })
	var attempts int
	var lastError string
	if err := pool.QueryRow(t.Context(), `SELECT attempts, last_error FROM outbox WHERE id = $1`, id).Scan(&attempts, &lastError); err != nil {
		t.Fatal(err)
	}
	if attempts == 0 || !strings.Contains(lastError, "nack") {
		t.Fatalf("attempts %d, last_error %q", attempts, lastError)
	}
	if n := strings.Count(logs.String(), "cannot publish; retrying"); n != 1 {
		t.Fatalf("%d WARN lines for one failure streak:\n%s", n, logs)
	}
}
