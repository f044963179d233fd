package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/testkit"
	"example.com/shop/testkit/servetest"
)

// TestDatabaseOutagePausesTheConsumer stops stock's database from accepting
// connections (ALLOW_CONNECTIONS false, its sessions terminated) for longer than all
// retry delays together while events arrive: the consumer pauses and says so on
// /readyz, nothing is dead-lettered, and once the database is back every event is
// applied exactly once.
func TestDatabaseOutagePausesTheConsumer(t *testing.T) {
	t.Parallel()
	amqpURL := testkit.NewVhost(t)
	dbURL := testkit.EmptyDatabaseURL(t)
	vars := map[string]string{
		"STOCK_DATABASE_URL": dbURL,
		"AMQP_URL":           amqpURL,
		"STOCK_WORKERS":      "2",
		"STOCK_MAX_ATTEMPTS": "3",
		"STOCK_RETRY_DELAYS": "50ms,100ms",
	}
	servetest.Migrate(t, run, "stock", vars)
	srv := servetest.Start(t, run, "stock", vars)

	first, _ := servetest.Placed(t, "1.000")
	servetest.Publish(t, amqpURL, first)

	ctx := testkit.Context(t)
	admin, err := pgx.Connect(ctx, testkit.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	db := pgx.Identifier{strings.TrimPrefix(u.Path, "/")}.Sanitize()
	waitFor(t, "the first event applied", func() bool { return countReserved(t, dbURL) == 1 })

	allow := func(on bool) {
		t.Helper()
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS "+map[bool]string{true: "true", false: "false"}[on]); err != nil {
			t.Fatal(err)
		}
	}
	allow(false)
	t.Cleanup(func() { _, _ = admin.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true") })
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`,
		strings.TrimPrefix(u.Path, "/")); err != nil {
		t.Fatal(err)
	}

	const during = 10
	for range during {
		env, _ := servetest.Placed(t, "2.000")
		servetest.Publish(t, amqpURL, env)
	}
	time.Sleep(2 * time.Second) // far longer than the retry delays together (150 ms)
	if n := queueLength(t, amqpURL, contracts.QueueStockDLQ); n != 0 {
		t.Fatalf("%d events dead-lettered during the outage", n)
	}
	waitFor(t, "/readyz to name the paused consumer", func() bool {
		status, body := servetest.Get(t, srv.URL+"/readyz")
		return status == http.StatusServiceUnavailable && strings.Contains(body, "consumer") && strings.Contains(body, "postgres")
	})

	allow(true)
	waitFor(t, "every event applied", func() bool { return countReserved(t, dbURL) == during+1 })
	servetest.GetJSON(t, srv.URL+"/readyz", http.StatusOK, nil)
	if n := queueLength(t, amqpURL, contracts.QueueStockDLQ); n != 0 {
		t.Errorf("%d events dead-lettered", n)
	}
	var rows, events int
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM reservation), (SELECT count(*) FROM processed_event)`).Scan(&rows, &events); err != nil || rows != during+1 || events != during+1 {
		t.Errorf("%d reservations and %d keys for %d one-line orders (%v): an event was applied twice", rows, events, during+1, err)
	}
	srv.Stop(t)
	logs := srv.Logs.String()
	if strings.Count(logs, "amqp consumer paused") < 1 || !strings.Contains(logs, `"msg":"amqp consumer resumed"`) {
		t.Errorf("want WARN lines for the pause and the resume:\n%s", srv.Logs.Tail(8<<10))
	}
	if strings.Contains(logs, "attempts exhausted") || strings.Contains(logs, "retrying later") {
		t.Errorf("the outage spent attempts:\n%s", srv.Logs.Tail(8<<10))
	}
}

// waitFor polls cond every 50 ms, failing t after 60 s (a hang guard).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(60 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// countReserved counts the rows of stock's reservation table, -1 while the database
// refuses connections.
func countReserved(t *testing.T, dbURL string) int {
	t.Helper()
	ctx := testkit.Context(t)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return -1
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM reservation`).Scan(&n); err != nil {
		return -1
	}
	return n
}

// queueLength is the number of ready messages in queue on the broker at amqpURL.
func queueLength(t *testing.T, amqpURL, queue string) int {
	t.Helper()
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect %s: %v", queue, err)
	}
	return q.Messages
}
