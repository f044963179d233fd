package consumerapp_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/consumerapp/consumerapptest"
	"example.com/shop/platform/testkit"
)

// TestDatabaseOutagePausesTheConsumer stops the service's database from accepting
// connections (ALLOW_CONNECTIONS false, its sessions terminated) for longer than all
// retry delays together while events arrive: the consumer pauses and says so on
// /readyz, nothing is dead-lettered, and once the database is back every event is
// applied exactly once.
func TestDatabaseOutagePausesTheConsumer(t *testing.T) {
	t.Parallel()
	spec := sampleSpec(t)
	amqpURL := testkit.NewVhost(t)
	dbURL := testkit.EmptyDatabaseURL(t)
	vars := map[string]string{
		"SAMPLE_DATABASE_URL": dbURL,
		"AMQP_URL":            amqpURL,
		"SAMPLE_WORKERS":      "2",
		"SAMPLE_MAX_ATTEMPTS": "3",
		"SAMPLE_RETRY_DELAYS": "50ms,100ms",
	}
	consumerapptest.Migrate(t, spec, vars)
	srv := consumerapptest.Start(t, spec, vars)

	first, _ := consumerapptest.Placed(t, "1.000")
	consumerapptest.Publish(t, amqpURL, first)

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
	waitFor(t, "the first event applied", func() bool { return countSeen(t, dbURL) == 1 })

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
		env, _ := consumerapptest.Placed(t, "2.000")
		consumerapptest.Publish(t, amqpURL, env)
	}
	time.Sleep(2 * time.Second) // far longer than the retry delays together (150 ms)
	if n := queueLength(t, amqpURL, "sample.events.dlq"); n != 0 {
		t.Fatalf("%d events dead-lettered during the outage", n)
	}
	waitFor(t, "/readyz to name the paused consumer", func() bool {
		status, body := consumerapptest.Get(t, srv.URL+"/readyz")
		return status == http.StatusServiceUnavailable && strings.Contains(body, "consumer") && strings.Contains(body, "postgres")
	})

	allow(true)
	waitFor(t, "every event applied", func() bool { return countSeen(t, dbURL) == during+1 })
	consumerapptest.GetJSON(t, srv.URL+"/readyz", http.StatusOK, nil)
	if n := queueLength(t, amqpURL, "sample.events.dlq"); n != 0 {
		t.Errorf("%d events dead-lettered", n)
	}
	var rows, events int
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM seen`).Scan(&rows, &events); err != nil || rows != events {
		t.Errorf("seen holds %d rows for %d events (%v): an event was applied twice", rows, events, err)
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

// countSeen counts the rows of the sample service's seen table, -1 while the
// database refuses connections.
func countSeen(t *testing.T, dbURL string) int {
	t.Helper()
	ctx := testkit.Context(t)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return -1
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM seen`).Scan(&n); err != nil {
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
