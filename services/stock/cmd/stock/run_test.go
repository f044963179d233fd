package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/services/stock/migrations"
	"example.com/shop/testkit"
	"example.com/shop/testkit/servetest"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// reservations reads GET /reservations of orderID until it lists want reservations,
// each with status, failing t after 60 s (a hang guard).
func reservations(t *testing.T, base string, orderID uuid.UUID, want int, status string) []map[string]string {
	t.Helper()
	var list []map[string]string
	deadline := time.Now().Add(60 * time.Second)
	for {
		servetest.GetJSON(t, base+"/reservations?order_id="+orderID.String(), http.StatusOK, &list)
		if len(list) == want && (want == 0 || list[0]["status"] == status) {
			return list
		}
		if time.Now().After(deadline) {
			t.Fatalf("reservations of %s = %v, want %d", orderID, list, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServe runs `stock migrate` and `stock serve` in process on a fresh database and
// vhost, with and without inbox group commit, publishes a placed event the way the
// relay does and reads the reservation over HTTP, then its cancel and sees it
// released; servetest checks the clean shutdown and that nothing was logged at ERROR
// level.
func TestServe(t *testing.T) {
	t.Parallel()
	for _, group := range []string{"1", "4"} {
		t.Run("inbox_group="+group, func(t *testing.T) {
			t.Parallel()
			amqpURL := testkit.NewVhost(t)
			vars := map[string]string{
				"STOCK_DATABASE_URL": testkit.EmptyDatabaseURL(t),
				"AMQP_URL":           amqpURL,
				"STOCK_WORKERS":      "2",
				"STOCK_INBOX_GROUP":  group,
				"STOCK_RETRY_DELAYS": "50ms,100ms",
			}
			if out := servetest.Migrate(t, run, "stock", vars); !strings.Contains(out, `"msg":"database is up to date","service":"stock-migrate"`) || !strings.Contains(out, `"applied":12}`) {
				t.Errorf("migrate said %q", out)
			}
			srv := servetest.Start(t, run, "stock", vars)

			placed, p := servetest.Placed(t, "2.000")
			servetest.Publish(t, amqpURL, placed)
			list := reservations(t, srv.URL, p.OrderID, 1, "held")
			if list[0]["quantity"] != "2.000" || list[0]["order_id"] != p.OrderID.String() {
				t.Fatalf("reservations = %v, want one of 2.000 for order %s", list, p.OrderID)
			}
			p.Version = 3
			cancelled, err := contracts.NewEnvelope(contracts.EventOrderCancelled, contracts.ProducerOrder, "corr", contracts.OrderCancelled(p), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			servetest.Publish(t, amqpURL, cancelled)
			reservations(t, srv.URL, p.OrderID, 1, "released")

			_, m := servetest.Get(t, srv.URL+"/metrics")
			for _, want := range []string{`inbox_processed_total{consumer="stock"} 2`,
				`amqp_consumer_processed_total{consumer="stock",queue="stock.events"} 2`, "http_requests_total", "go_goroutines"} {
				if !strings.Contains(m, want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
			srv.Stop(t)
			for _, want := range []string{`"service":"stock"`, `"inbox_group":` + group} {
				if !strings.Contains(srv.Logs.String(), want) {
					t.Errorf("serve's logs lack %s", want)
				}
			}
		})
	}
}

// TestServeWaitsForTheDatabase: with PostgreSQL and the broker unreachable serve
// answers /healthz, reports itself not ready, refuses the API with 503, and stops
// cleanly when its context ends while it still waits.
func TestServeWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	vars := map[string]string{
		"STOCK_DATABASE_URL": "postgres://postgres:secret@127.0.0.1:1/stock?sslmode=disable",
		"AMQP_URL":           "amqp://guest:guest@127.0.0.1:1/",
		"HTTP_ADDR":          addr,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &testkit.Logs{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"stock", "serve"}, env(vars), io.Discard, logs) }()
	base := "http://" + addr
	servetest.GetJSON(t, base+"/healthz", http.StatusOK, nil)
	if status, body := servetest.Get(t, base+"/readyz"); status != http.StatusServiceUnavailable || !strings.Contains(body, "postgres") {
		t.Errorf("GET /readyz = %d %s, want 503 naming postgres", status, body)
	}
	if status, body := servetest.Get(t, base+"/reservations?order_id="+uuid.NewString()); status != http.StatusServiceUnavailable {
		t.Errorf("GET /reservations = %d %s, want 503 while starting", status, body)
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
			t.Errorf("serve returned %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop within 10 s of cancel")
	}
	if l := logs.String(); strings.Contains(l, "secret") {
		t.Errorf("the logs show the database password:\n%s", l)
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"STOCK_DATABASE_URL": testkit.EmptyDatabaseURL(t)}
	// migrate logs JSON as stock-migrate: each migration applied, then the outcome.
	got := servetest.Migrate(t, run, "stock", vars)
	for _, want := range []string{`"msg":"migration applied","service":"stock-migrate","set":"inbox","version":1,`,
		`"set":"inbox","version":2,`, `"set":"inbox","version":3,`, `"set":"dead_letter","version":1,`, `"set":"dead_letter","version":2,`, `"set":"outbox","version":2,`, `"set":"stock","version":2,`, `"set":"stock","version":41,`, `"msg":"database is up to date","service":"stock-migrate","database":`, `"applied":12}`} {
		if !strings.Contains(got, want) {
			t.Errorf("first migrate logged %s, want %s", got, want)
		}
	}
	if got := servetest.Migrate(t, run, "stock", vars); !strings.Contains(got, `"applied":0}`) {
		t.Errorf("second migrate logged %s", got)
	}
	vars["STOCK_DATABASE_URL"] = "postgres://postgres:secret@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"
	err := run(testkit.Context(t), []string{"stock", "migrate"}, env(vars), io.Discard, io.Discard)
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("migrate on a closed port: err = %v, want one without the password", err)
	}
}

// TestPurgeInbox deletes only stock's keys older than the horizon, and refuses a
// horizon below INBOX_MIN_RETENTION, a missing one and bad arguments.
func TestPurgeInbox(t *testing.T) {
	t.Parallel()
	pool, dbURL := testkit.NewDatabase(t, migrations.Schema)
	ctx := testkit.Context(t)
	// Two old keys and one recent key of stock, one old key of another consumer.
	_, err := pool.Exec(ctx, `INSERT INTO processed_event (consumer, message_key, processed_at) VALUES
		('stock', $1, now() - interval '300 hours'),
		('stock', $2, now() - interval '200 hours'),
		('stock', $3, now() - interval '1 hour'),
		('other', $4, now() - interval '300 hours')`,
		uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()))
	if err != nil {
		t.Fatal(err)
	}
	purge := func(vars map[string]string, args ...string) (string, error) {
		kv := map[string]string{"STOCK_DATABASE_URL": dbURL}
		for k, v := range vars {
			kv[k] = v
		}
		var out bytes.Buffer
		err := run(ctx, append([]string{"stock", "purge-inbox"}, args...), env(kv), &out, io.Discard)
		return out.String(), err
	}
	if out, err := purge(nil, "--older-than", "170h"); err != nil || !strings.HasPrefix(out, "purged 2 processed_event keys") {
		t.Fatalf("purge: %q, %v", out, err)
	}
	rows, _ := pool.Query(ctx, `SELECT consumer FROM processed_event ORDER BY consumer`)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || strings.Join(left, ",") != "other,stock" {
		t.Errorf("left keys of %v (%v), want other,stock", left, err)
	}
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"below the default minimum retention", []string{"--older-than", "1h"}, nil, "shorter than INBOX_MIN_RETENTION (168h0m0s)"},
		{"below a configured minimum retention", []string{"--older-than", "47h"}, map[string]string{"INBOX_MIN_RETENTION": "48h"}, "shorter than INBOX_MIN_RETENTION (48h0m0s)"},
		{"no horizon", nil, nil, "--older-than DURATION is required"},
		{"negative horizon", []string{"--older-than", "-200h"}, nil, "--older-than DURATION is required"},
		{"bad horizon", []string{"--older-than", "soon"}, nil, "invalid value"},
		{"extra argument", []string{"--older-than", "200h", "now"}, nil, "unexpected argument"},
		{"bad minimum retention", []string{"--older-than", "200h"}, map[string]string{"INBOX_MIN_RETENTION": "soon"}, "INBOX_MIN_RETENTION"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := purge(tt.env, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	// A lower minimum retention allows a shorter horizon.
	if out, err := purge(map[string]string{"INBOX_MIN_RETENTION": "30m"}, "--older-than", "45m"); err != nil || !strings.HasPrefix(out, "purged 1 processed_event keys") {
		t.Errorf("purge: %q, %v", out, err)
	}
}

// TestConfig: stock keeps its defaults (database, port :8082, 256 workers, inbox group
// commit 128 x 2), reads every variable, and names every bad one.
func TestConfig(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(nil), service.LoadServeConfig)
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://postgres@localhost:5432/stock?sslmode=disable" || c.AMQPURL != config.DefaultAMQPURL ||
		c.HTTPAddr != ":8082" || c.LogLevel != slog.LevelInfo || c.Workers != 256 || c.Prefetch != 1024 ||
		c.InboxGroup != 128 || c.InboxTx != 2 || c.MaxAttempts != 5 || fmt.Sprint(c.RetryDelays) != "[1s 5s 30s]" ||
		c.MinRetention != 168*time.Hour || c.RedeclareInterval != 5*time.Second || c.PoolSize() != 6 {
		t.Errorf("defaults = %+v", c)
	}
	c, err = config.Load(env(map[string]string{
		"STOCK_DATABASE_URL": "postgres://db/x", "AMQP_URL": "amqp://mq/", "HTTP_ADDR": ":1",
		"LOG_LEVEL": "debug", "STOCK_WORKERS": "2", "STOCK_INBOX_GROUP": "1", "STOCK_INBOX_TX": "5",
		"STOCK_RETRY_DELAYS": "50ms, 2s", "STOCK_MAX_ATTEMPTS": "3", "INBOX_MIN_RETENTION": "1h",
	}), service.LoadServeConfig)
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://db/x" || c.AMQPURL != "amqp://mq/" || c.HTTPAddr != ":1" ||
		c.LogLevel != slog.LevelDebug || c.Workers != 2 || c.Prefetch != 8 || c.InboxGroup != 1 || c.InboxTx != 5 ||
		c.MaxAttempts != 3 || fmt.Sprint(c.RetryDelays) != "[50ms 2s]" || c.MinRetention != time.Hour || c.PoolSize() != 6 {
		t.Errorf("config = %+v", c)
	}
	_, err = config.Load(env(map[string]string{
		"STOCK_WORKERS": "many", "STOCK_PREFETCH": "0", "STOCK_INBOX_GROUP": "-2", "STOCK_INBOX_TX": "x",
		"STOCK_MAX_ATTEMPTS": "-1", "STOCK_RETRY_DELAYS": "1s,1.5ms", "LOG_LEVEL": "loud", "INBOX_MIN_RETENTION": "0s",
		"STOCK_DATABASE_URL": "::bad", "AMQP_URL": "http://u:secret@host/",
	}), service.LoadServeConfig)
	var ve *config.VarError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want a *config.VarError", err)
	}
	for _, key := range []string{"STOCK_WORKERS", "STOCK_PREFETCH", "STOCK_INBOX_GROUP", "STOCK_INBOX_TX",
		"STOCK_MAX_ATTEMPTS", "STOCK_RETRY_DELAYS", "LOG_LEVEL", "INBOX_MIN_RETENTION", "STOCK_DATABASE_URL", "AMQP_URL"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("err = %v, does not name %s", err, key)
		}
	}
}

// TestBadSettingsAreNamed: every subcommand refuses to start on a bad variable it
// reads and names it.
func TestBadSettingsAreNamed(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"LOG_LEVEL": "loud", "STOCK_WORKERS": "many", "INBOX_MIN_RETENTION": "soon"})
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"serve"}, []string{"LOG_LEVEL", "STOCK_WORKERS", "INBOX_MIN_RETENTION"}},
		{[]string{"migrate"}, []string{"LOG_LEVEL"}},
		{[]string{"purge-inbox", "--older-than", "200h"}, []string{"LOG_LEVEL", "INBOX_MIN_RETENTION"}},
		{[]string{"dlq", "list"}, []string{"LOG_LEVEL", "INBOX_MIN_RETENTION"}},
	} {
		err := run(context.Background(), append([]string{"stock"}, tt.args...), vars, io.Discard, io.Discard)
		for _, want := range tt.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%v: err = %v, want it to name %s", tt.args, err, want)
			}
		}
	}
}

// TestDLQReplayDryRunRunsTheConsumersCheck: `stock dlq replay --dry-run` runs stock's
// own check of a delivery: a dead letter that fails the contract's schema is refused,
// with the consumer's reason, and stays in stock.events.dlq.
func TestDLQReplayDryRunRunsTheConsumersCheck(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, dbURL := testkit.NewDatabase(t, migrations.Schema)
	amqpURL := testkit.NewVhost(t)
	consumer, _ := contracts.ConsumerNamed(contracts.ConsumerStock)
	conn, err := amqp.DialOptions(ctx, amqpURL, amqp.EventTopology(amqp.ConsumerQueue(consumer, []time.Duration{time.Second})),
		nil, amqp.Options{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, err := amqp091.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ch, err := raw.Channel()
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.Must(uuid.NewV7())
	body := fmt.Sprintf(`{"event_id":%q,"event_name":%q,"occurred_at":%q,"producer":"order","schema_version":1,"payload":{}}`,
		id, contracts.EventOrderPlaced, time.Now().UTC().Format("2006-01-02T15:04:05.000Z"))
	if err := ch.PublishWithContext(ctx, "", contracts.QueueStockDLQ, true, false, amqp091.Publishing{
		MessageId: id.String(), ContentType: "application/json", DeliveryMode: amqp091.Persistent, Body: []byte(body),
	}); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	vars := env(map[string]string{"STOCK_DATABASE_URL": dbURL, "AMQP_URL": amqpURL})
	err = run(ctx, []string{"stock", "dlq", "replay", "--dry-run", "--all"}, vars, &out, io.Discard)
	if err == nil || !strings.Contains(out.String(), "refused") || !strings.Contains(out.String(), "would dead-letter again: ") ||
		!strings.Contains(out.String(), id.String()) {
		t.Fatalf("dlq replay --dry-run --all = %q, %v; want %s refused: would dead-letter again: <reason>", out.String(), err, id)
	}
	q, err := ch.QueueDeclarePassive(contracts.QueueStockDLQ, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"})
	if err != nil || q.Messages != 1 {
		t.Fatalf("%s holds %d messages (%v), want 1", contracts.QueueStockDLQ, q.Messages, err)
	}
}

// TestRelayPublishesTheAnswers: `stock relay` publishes what stock's consumer wrote to
// its outbox (docs/architecture.md, rule 2): a placed order of an untracked product
// is answered stock.reservation.confirmed.v1, which reaches order.events with the
// event id as message id and stock as its CloudEvents source; the relay stops cleanly.
func TestRelayPublishesTheAnswers(t *testing.T) {
	t.Parallel()
	amqpURL := testkit.NewVhost(t)
	vars := map[string]string{
		"STOCK_DATABASE_URL":  testkit.EmptyDatabaseURL(t),
		"AMQP_URL":            amqpURL,
		"STOCK_WORKERS":       "2",
		"RELAY_POLL_INTERVAL": "100ms",
	}
	servetest.Migrate(t, run, "stock", vars)
	servetest.Start(t, run, "stock", vars)

	relayVars := map[string]string{"HTTP_ADDR": "127.0.0.1:0"}
	for k, v := range vars {
		relayVars[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &testkit.Logs{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"stock", "relay"}, env(relayVars), io.Discard, logs) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay logs:\n%s", logs.Tail(8<<10))
		}
	})

	placed, p := servetest.Placed(t, "1.000")
	servetest.Publish(t, amqpURL, placed)

	// The relay declares order.events (bound to stock's answers) when it starts.
	d := servetest.Receive(t, amqpURL, contracts.QueueOrder)
	var answer struct {
		EventID string                              `json:"event_id"`
		Payload contracts.StockReservationConfirmed `json:"payload"`
	}
	if err := json.Unmarshal(d.Body, &answer); err != nil {
		t.Fatal(err)
	}
	if d.Type != contracts.EventStockReservationConfirmed || d.MessageId != answer.EventID ||
		d.Headers["cloudEvents_source"] != "/"+contracts.ProducerStock || answer.Payload.OrderID != p.OrderID {
		t.Errorf("answer type %q id %q headers %v payload %+v, want %s for order %s from /stock",
			d.Type, d.MessageId, d.Headers, answer.Payload, contracts.EventStockReservationConfirmed, p.OrderID)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("relay returned %v after shutdown, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop within 30 s")
	}
	if l := logs.String(); !strings.Contains(l, `"service":"stock-relay"`) || strings.Contains(l, `"level":"ERROR"`) {
		t.Errorf("relay logs lack service stock-relay or hold errors:\n%s", logs.Tail(8<<10))
	}
}
