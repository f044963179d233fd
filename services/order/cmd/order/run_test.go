package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/config"
	"example.com/shop/platform/pg"
	"example.com/shop/services/order/migrations"
	"example.com/shop/testkit"
	"example.com/shop/testkit/servetest"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// logWatcher collects the JSON log lines of a running command and reports the address
// of the "http server listening" line.
type logWatcher struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	addr  chan string
	found bool
}

func newLogWatcher() *logWatcher { return &logWatcher{addr: make(chan string, 1)} }

func (w *logWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for line := range bytes.Lines(p) {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "http server listening" && !w.found {
			w.found = true
			w.addr <- rec.Addr
		}
	}
	return len(p), nil
}

func (w *logWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startServe runs `order serve` in-process on a free port, waits until GET /readyz
// answers 200 and returns its base URL, the logs, and a stop function that shuts it
// down and returns run's error.
func startServe(t *testing.T, vars map[string]string) (string, *logWatcher, func() error) {
	t.Helper()
	base, logs, stop := startListening(t, vars)
	deadline := time.Now().Add(60 * time.Second)
	for {
		status, body := call(t, http.MethodGet, base+"/readyz", "")
		if status == http.StatusOK {
			return base, logs, stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready within 60 s: %d %s\n%s", status, body, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startListening runs `order serve` in-process on a free port and returns once it
// listens, with its base URL, the logs, and a stop function that shuts it down and
// returns run's error.
func startListening(t *testing.T, vars map[string]string) (string, *logWatcher, func() error) {
	t.Helper()
	if vars["AMQP_URL"] == "" {
		vars["AMQP_URL"] = testkit.NewVhost(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	vars["HTTP_ADDR"] = "127.0.0.1:0"
	logs := newLogWatcher()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"order", "serve"}, env(vars), io.Discard, logs) }()
	stop := sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return fmt.Errorf("serve did not stop within 30 s:\n%s", logs)
		}
	})
	select {
	case addr := <-logs.addr:
		t.Cleanup(func() { _ = stop() })
		return "http://" + addr, logs, stop
	case err := <-done:
		cancel()
		t.Fatalf("serve ended before listening: %v\n%s", err, logs)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("serve did not listen within 60 s:\n%s", logs)
	}
	return "", nil, nil
}

func call(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestServeDrivesOrdersOverHTTP: serve creates and places an order over HTTP,
// writing its event to the outbox, and consumes stock's answer from order.events:
// the confirmation moves the order to confirmed and writes order.order.confirmed.v1.
func TestServeDrivesOrdersOverHTTP(t *testing.T) {
	t.Parallel()
	pool, url := testkit.NewDatabase(t, migrations.Schema)
	amqpURL := testkit.NewVhost(t)
	base, logs, stop := startServe(t, map[string]string{"ORDER_DATABASE_URL": url, "AMQP_URL": amqpURL})

	for _, path := range []string{"/healthz", "/readyz"} {
		if status, body := call(t, http.MethodGet, base+path, ""); status != http.StatusOK {
			t.Fatalf("GET %s = %d %s", path, status, body)
		}
	}
	status, body := call(t, http.MethodPost, base+"/orders",
		`{"customer_id":"`+uuid.NewString()+`","lines":[{"product_id":"`+uuid.NewString()+`","quantity":"2"}]}`)
	if status != http.StatusCreated {
		t.Fatalf("create = %d %s", status, body)
	}
	var o struct {
		ID      string `json:"id"`
		Status  string `json:"status"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(body, &o); err != nil {
		t.Fatal(err)
	}
	status, body = call(t, http.MethodPost, base+"/orders/"+o.ID+"/place", "")
	if err := json.Unmarshal(body, &o); status != http.StatusOK || err != nil || o.Status != "placed" || o.Version != 2 {
		t.Fatalf("place = %d %s", status, body)
	}
	if status, body := call(t, http.MethodPost, base+"/orders/"+o.ID+"/place", ""); status != http.StatusConflict {
		t.Fatalf("second place = %d %s", status, body)
	}
	var rows int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Fatalf("outbox rows = %d, want 1", rows)
	}
	status, body = call(t, http.MethodGet, base+"/metrics", "")
	if status != http.StatusOK || !strings.Contains(string(body), `http_requests_total{method="POST",route="/orders/{id}/place",status="200"} 1`) {
		t.Fatalf("metrics = %d, lacking the place request:\n%s", status, body)
	}

	answer, err := contracts.NewEnvelope(contracts.EventStockReservationConfirmed, contracts.ProducerStock, o.ID,
		contracts.StockReservationConfirmed{OrderID: uuid.MustParse(o.ID), OrderVersion: 2,
			Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "2.000"}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Serve's routes wait for its queue while the broker answers: an answer to an order
	// taken from then on finds the queue bound to its routing key, not the unroutable one.
	queueDeclared(t, amqpURL, contracts.QueueOrder)
	servetest.Publish(t, amqpURL, answer)
	for deadline := time.Now().Add(60 * time.Second); o.Status != "confirmed"; {
		if time.Now().After(deadline) {
			t.Fatalf("order %s still %s 60 s after stock's confirmation:\n%s", o.ID, o.Status, logs)
		}
		time.Sleep(20 * time.Millisecond)
		status, body = call(t, http.MethodGet, base+"/orders/"+o.ID, "")
		if err := json.Unmarshal(body, &o); status != http.StatusOK || err != nil {
			t.Fatalf("get = %d %s", status, body)
		}
	}
	var confirmed int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE event_name = $1`,
		contracts.EventOrderConfirmed).Scan(&confirmed); err != nil || confirmed != 1 || o.Version != 3 {
		t.Fatalf("confirmed order v%d with %d %s outbox rows (%v), want v3 and 1", o.Version, confirmed, contracts.EventOrderConfirmed, err)
	}

	if err := stop(); err != nil {
		t.Fatalf("serve returned %v after shutdown, want nil", err)
	}
	if strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Errorf("serve logged errors:\n%s", logs)
	}
	if n := strings.Count(logs.String(), "listening"); n != 1 {
		t.Errorf("%d lines say serve is listening, want 1:\n%s", n, logs)
	}
}

func TestReadyzFailsWithoutDatabase(t *testing.T) {
	t.Parallel()
	_, url := testkit.NewDatabase(t, migrations.Schema)
	base, _, _ := startServe(t, map[string]string{"ORDER_DATABASE_URL": url})
	// Cut the service's connections off from the server: the readiness ping must fail.
	admin, _ := testkit.NewDatabase(t, nil)
	name := url[strings.LastIndex(url, "/")+1:]
	if i := strings.IndexByte(name, '?'); i >= 0 {
		name = name[:i]
	}
	if _, err := admin.Exec(context.Background(), `ALTER DATABASE `+quoteIdent(name)+` ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(context.Background(),
		`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name); err != nil {
		t.Fatal(err)
	}
	status, body := call(t, http.MethodGet, base+"/readyz", "")
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "postgres") {
		t.Fatalf("readyz = %d %s, want 503 naming postgres", status, body)
	}
	if _, err := admin.Exec(context.Background(), `ALTER DATABASE `+quoteIdent(name)+` ALLOW_CONNECTIONS true`); err != nil {
		t.Fatal(err)
	}
}

// TestServeWaitsForTheDatabase: with the database unreachable serve listens, answers
// /healthz, reports itself not ready, refuses the API with 503, and stops cleanly when
// its context ends while it still waits.
func TestServeWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	base, logs, stop := startListening(t, map[string]string{
		"ORDER_DATABASE_URL": "postgres://postgres:secret@127.0.0.1:1/orders?sslmode=disable",
		"MIGRATE_ON_START":   "true",
	})
	if status, body := call(t, http.MethodGet, base+"/healthz", ""); status != http.StatusOK {
		t.Errorf("GET /healthz = %d %s, want 200", status, body)
	}
	if status, body := call(t, http.MethodGet, base+"/readyz", ""); status != http.StatusServiceUnavailable || !strings.Contains(string(body), "postgres") {
		t.Errorf("GET /readyz = %d %s, want 503 naming postgres", status, body)
	}
	if status, body := call(t, http.MethodGet, base+"/orders/"+uuid.NewString(), ""); status != http.StatusServiceUnavailable {
		t.Errorf("GET /orders/{id} = %d %s, want 503 while starting", status, body)
	}
	// The first failed attempt is logged before the stop, so the stop hits the wait.
	for end := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), `"level":"WARN","msg":"database not answering, retrying"`); {
		if time.Now().After(end) {
			t.Fatalf("no WARN line for the database:\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
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

// TestServeNamesMigrateOnAMissingDatabase: serve against a database that does not
// exist, then one without tables, keeps waiting and says in its WARN lines that
// `order migrate` creates them; once migrated it serves.
func TestServeNamesMigrateOnAMissingDatabase(t *testing.T) {
	t.Parallel()
	url := testkit.EmptyDatabaseURL(t)
	_, logs, stop := startListening(t, map[string]string{"ORDER_DATABASE_URL": url})
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	waitLog := func(want string) {
		t.Helper()
		for end := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), want); {
			if time.Now().After(end) {
				t.Fatalf("serve never logged %s:\n%s", want, logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitLog("does not exist: run `order migrate`")
	if err := pg.EnsureDatabase(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	waitLog("lacks the tables outbox, processed_event: run `order migrate`")
	if err := run(context.Background(), []string{"order", "migrate"}, env(map[string]string{"ORDER_DATABASE_URL": url}), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	waitLog(`"msg":"connected"`)
	if !strings.Contains(logs.String(), `"service":"order"`) {
		t.Errorf("serve's lines lack service order:\n%s", logs)
	}
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func TestServeMigrateOnStartCreatesDatabase(t *testing.T) {
	t.Parallel()
	base, _, stop := startServe(t, map[string]string{
		"ORDER_DATABASE_URL": testkit.EmptyDatabaseURL(t),
		"MIGRATE_ON_START":   "true",
	})
	if status, body := call(t, http.MethodGet, base+"/orders/"+uuid.NewString(), ""); status != http.StatusNotFound {
		t.Fatalf("GET unknown order = %d %s, want 404 from a migrated database", status, body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateCreatesDatabaseAndIsIdempotent: migrate creates the database and logs,
// as JSON lines of the service order-migrate, each migration it applies and the
// outcome; the second run applies nothing. stdout stays empty.
func TestMigrateCreatesDatabaseAndIsIdempotent(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"ORDER_DATABASE_URL": testkit.EmptyDatabaseURL(t)}
	var out, logs bytes.Buffer
	if err := run(context.Background(), []string{"order", "migrate"}, env(vars), &out, &logs); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	applied := 0
	for _, line := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
		var rec struct {
			Msg     string `json:"msg"`
			Service string `json:"service"`
			Applied *int   `json:"applied"`
		}
		if err := json.Unmarshal(line, &rec); err != nil || rec.Service != "order-migrate" {
			t.Errorf("log line %q is not JSON of order-migrate (%v)", line, err)
		}
		if rec.Msg == "migration applied" {
			applied++
		}
		if rec.Msg == "database is up to date" && (rec.Applied == nil || *rec.Applied != applied || applied == 0) {
			t.Errorf("up-to-date line %s after %d applied lines", line, applied)
		}
	}
	if out.Len() != 0 || !strings.Contains(logs.String(), `"msg":"database is up to date"`) {
		t.Errorf("first migrate: stdout %q, logs %s", out.String(), logs.String())
	}
	logs.Reset()
	if err := run(context.Background(), []string{"order", "migrate"}, env(vars), &out, &logs); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if !strings.Contains(logs.String(), `"applied":0`) || strings.Contains(logs.String(), "migration applied") {
		t.Errorf("second migrate logged %s", logs.String())
	}
}

func TestCommandLineErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		vars map[string]string
		want []string
	}{
		{[]string{"order"}, nil, []string{"no command given"}},
		{[]string{"order", "dance"}, nil, []string{`unknown command "dance"`}},
		{[]string{"order", "serve", "extra"}, nil, []string{`unexpected argument "extra"`}},
		{[]string{"order", "serve"}, map[string]string{"LOG_LEVEL": "loud", "MIGRATE_ON_START": "maybe"},
			[]string{"LOG_LEVEL", "MIGRATE_ON_START"}},
		{[]string{"order", "migrate"}, map[string]string{"LOG_LEVEL": "loud"}, []string{"LOG_LEVEL"}},
		// A URL that cannot be parsed is refused before serve listens.
		{[]string{"order", "serve"}, map[string]string{"ORDER_DATABASE_URL": "::bad", "HTTP_ADDR": "256.0.0.1:1"},
			[]string{"config: ORDER_DATABASE_URL"}},
	} {
		err := run(ctx, tc.args, env(tc.vars), io.Discard, io.Discard)
		for _, want := range tc.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("run %v: err = %v, want it to mention %q", tc.args, err, want)
			}
		}
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"order", "help"}, env(nil), &out, io.Discard); err != nil || !strings.Contains(out.String(), "usage") {
		t.Errorf("help: %v, %q", err, out.String())
	}
}

func TestConfigDefaultsAndMasking(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(env(nil), producer.LoadServeConfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DatabaseURL != "postgres://postgres@localhost:5432/orders?sslmode=disable" || cfg.HTTPAddr != ":8081" ||
		cfg.LogLevel != slog.LevelInfo || cfg.MigrateOnStart {
		t.Errorf("defaults = %+v", cfg)
	}
	cfg, err = config.Load(env(map[string]string{"ORDER_DATABASE_URL": "postgres://app:s3cret@db:5432/orders"}), producer.LoadServeConfig)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("starting", slog.Any("config", cfg))
	if strings.Contains(logs.String(), "s3cret") || !strings.Contains(logs.String(), "db:5432") {
		t.Errorf("logged config = %s, want the password masked", logs.String())
	}
}

// TestPurgeInboxKeepsTheIdempotencyKeys: `order purge-inbox` deletes only the keys of
// order's consumer (stock's answers); the API's Idempotency-Keys, kept in the same
// table under consumer order-api, are purge-outbox's to delete with the outbox.
func TestPurgeInboxKeepsTheIdempotencyKeys(t *testing.T) {
	t.Parallel()
	pool, url := testkit.NewDatabase(t, migrations.Schema)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO processed_event (consumer, message_key, processed_at) VALUES
       ('order', 'answer', now() - interval '800 hours'), ('order-api', 'create 1', now() - interval '800 hours')`); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"order", "purge-inbox", "--older-than", "720h"}, env(map[string]string{"ORDER_DATABASE_URL": url}), &out, io.Discard); err != nil {
		t.Fatalf("purge-inbox: %v", err)
	}
	rows, err := pool.Query(ctx, `SELECT consumer FROM processed_event ORDER BY consumer`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(left) != 1 || left[0] != "order-api" || !strings.Contains(out.String(), "purged 1 ") {
		t.Errorf("after purge-inbox: consumers %v (%v), output %q; want only order-api's key left, 1 purged", left, err, out.String())
	}
}

// TestServeTakesOrdersWithoutTheBroker: with the broker unreachable serve is ready
// on its database alone and places orders into the outbox (docs/architecture.md
// rule 1); the consumer keeps dialling behind the API, and serve stops cleanly.
func TestServeTakesOrdersWithoutTheBroker(t *testing.T) {
	t.Parallel()
	pool, url := testkit.NewDatabase(t, migrations.Schema)
	base, logs, stop := startServe(t, map[string]string{"ORDER_DATABASE_URL": url, "AMQP_URL": "amqp://guest:guest@127.0.0.1:1/"})
	status, body := call(t, http.MethodPost, base+"/orders",
		`{"customer_id":"`+uuid.NewString()+`","lines":[{"product_id":"`+uuid.NewString()+`","quantity":"1"}]}`)
	var o struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &o); status != http.StatusCreated || err != nil {
		t.Fatalf("create = %d %s", status, body)
	}
	if status, body := call(t, http.MethodPost, base+"/orders/"+o.ID+"/place", ""); status != http.StatusOK {
		t.Fatalf("place = %d %s", status, body)
	}
	var rows int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("outbox rows = %d (%v), want 1", rows, err)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve returned %v after shutdown, want nil", err)
	}
	if !strings.Contains(logs.String(), "broker") {
		t.Errorf("serve's logs do not mention the unreachable broker:\n%s", logs)
	}
}

// queueDeclared fails t unless queue exists now.
func queueDeclared(t *testing.T, amqpURL, queue string) {
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
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		t.Fatalf("queue %s is not declared once serve answers its routes: %v", queue, err)
	}
}
