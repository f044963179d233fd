package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/platform/testkit"
	"example.com/shop/services/shipping/internal/events"
	"example.com/shop/services/shipping/migrations"
)

// syncBuffer collects the logs of a running command.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// getJSON polls url until it answers want or the time is up, and decodes the
// body into dst.
func getJSON(t *testing.T, url string, want int, dst any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				if dst != nil {
					if err := json.Unmarshal(body, dst); err != nil {
						t.Fatalf("GET %s: %s: %v", url, body, err)
					}
				}
				return
			}
			err = fmt.Errorf("status %d: %s", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: want %d, last: %v", url, want, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServe runs `shipping serve` in process against a migrated database and a
// fresh vhost, publishes a placed event to app.events and reads the result
// over HTTP, then shuts the command down through its context.
func TestServe(t *testing.T) {
	t.Parallel()
	_, dbURL := testkit.NewDatabase(t, migrations.FS)
	amqpURL := testkit.NewVhost(t)
	addr := freeAddr(t)
	env := envOf(map[string]string{
		"SHIPPING_DATABASE_URL": dbURL,
		"AMQP_URL":              amqpURL,
		"HTTP_ADDR":             addr,
		"SHIPPING_WORKERS":      "2",
		"SHIPPING_RETRY_DELAYS": "50ms,100ms",
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"shipping", "serve"}, env, &stdout, &stderr) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", stderr.String())
		}
	})
	base := "http://" + addr
	getJSON(t, base+"/readyz", http.StatusOK, nil)

	orderID := uuid.New()
	envl, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, "corr-1", contracts.OrderPlaced{
		OrderID: orderID, CustomerID: uuid.New(), Version: 2,
		Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(envl)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(testkit.Context(t), amqpURL, events.Topology([]time.Duration{50 * time.Millisecond, 100 * time.Millisecond}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pub := amqp.NewPublisher(conn, contracts.Exchange)
	defer pub.Close()
	err = pub.PublishOne(testkit.Context(t), amqp.Message{
		RoutingKey: envl.EventName, MessageID: envl.EventID.String(), Type: envl.EventName, Body: body,
	}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	var status struct {
		OrderID string `json:"order_id"`
		Status  string `json:"status"`
		Version int    `json:"version"`
	}
	getJSON(t, base+"/order-status/"+orderID.String(), http.StatusOK, &status)
	if status.OrderID != orderID.String() || status.Status != "placed" || status.Version != 2 {
		t.Errorf("order status = %+v, want placed v2", status)
	}
	var shipment struct {
		Status string `json:"status"`
	}
	getJSON(t, base+"/shipments/"+orderID.String(), http.StatusOK, &shipment)
	if shipment.Status != "ready" {
		t.Errorf("shipment status = %q, want ready", shipment.Status)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`inbox_processed_total{consumer="shipping"} 1`, "http_requests_total", "go_goroutines"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v, want nil after a clean shutdown", err)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("serve did not stop")
	}
	if strings.Contains(stderr.String(), "guest:guest") {
		t.Error("logs show the broker password")
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	dbURL := testkit.EmptyDatabaseURL(t)
	env := envOf(map[string]string{"SHIPPING_DATABASE_URL": dbURL})
	var out bytes.Buffer
	if err := run(testkit.Context(t), []string{"shipping", "migrate"}, env, &out, io.Discard); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if !strings.Contains(out.String(), "(3 migrations applied now)") {
		t.Errorf("first migrate said %q", out.String())
	}
	out.Reset()
	if err := run(testkit.Context(t), []string{"shipping", "migrate"}, env, &out, io.Discard); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if !strings.Contains(out.String(), "(0 migrations applied now)") {
		t.Errorf("second migrate said %q", out.String())
	}
}

func TestPurgeInbox(t *testing.T) {
	t.Parallel()
	pool, dbURL := testkit.NewDatabase(t, migrations.FS)
	ctx := testkit.Context(t)
	// Two old keys and one recent key of shipping, one old key of another consumer.
	_, err := pool.Exec(ctx, `INSERT INTO processed_event (consumer, event_id, processed_at) VALUES
		('shipping', $1, now() - interval '300 hours'),
		('shipping', $2, now() - interval '200 hours'),
		('shipping', $3, now() - interval '1 hour'),
		('other', $4, now() - interval '300 hours')`,
		uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()))
	if err != nil {
		t.Fatal(err)
	}
	env := envOf(map[string]string{"SHIPPING_DATABASE_URL": dbURL})

	var out bytes.Buffer
	if err := run(ctx, []string{"shipping", "purge-inbox", "--older-than", "170h"}, env, &out, io.Discard); err != nil {
		t.Fatalf("purge: %v", err)
	}
	if !strings.HasPrefix(out.String(), "purged 2 processed_event keys") {
		t.Errorf("purge said %q", out.String())
	}
	var left []string
	rows, err := pool.Query(ctx, `SELECT consumer FROM processed_event ORDER BY consumer`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		left = append(left, c)
	}
	if rows.Err() != nil || strings.Join(left, ",") != "other,shipping" {
		t.Errorf("left keys of %v (%v), want other,shipping", left, rows.Err())
	}

	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"below the minimum retention", []string{"--older-than", "100h"}, nil, "shorter than INBOX_MIN_RETENTION"},
		{"no horizon", nil, nil, "--older-than DURATION is required"},
		{"negative horizon", []string{"--older-than", "-200h"}, nil, "--older-than DURATION is required"},
		{"extra argument", []string{"--older-than", "200h", "now"}, nil, "unexpected argument"},
		{"bad minimum retention", []string{"--older-than", "200h"}, map[string]string{"INBOX_MIN_RETENTION": "soon"}, "INBOX_MIN_RETENTION"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kv := map[string]string{"SHIPPING_DATABASE_URL": dbURL}
			for k, v := range tt.env {
				kv[k] = v
			}
			err := run(ctx, append([]string{"shipping", "purge-inbox"}, tt.args...), envOf(kv), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}

	// A lower minimum retention allows a shorter horizon.
	out.Reset()
	env = envOf(map[string]string{"SHIPPING_DATABASE_URL": dbURL, "INBOX_MIN_RETENTION": "30m"})
	if err := run(ctx, []string{"shipping", "purge-inbox", "--older-than", "45m"}, env, &out, io.Discard); err != nil {
		t.Fatalf("purge: %v", err)
	}
	if !strings.HasPrefix(out.String(), "purged 1 processed_event keys") {
		t.Errorf("purge said %q", out.String())
	}
}

func TestWithPoolSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://db/ship":                  "postgres://db/ship?pool_max_conns=6",
		"postgres://db/ship?pool_max_conns=3": "postgres://db/ship?pool_max_conns=3",
		"host=db dbname=ship":                 "host=db dbname=ship",
	} {
		if got := withPoolSize(in, 6); got != want {
			t.Errorf("withPoolSize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCommandLine(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"shipping"}, {"shipping", "ship-it"}} {
		err := run(context.Background(), args, envOf(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "usage: shipping") {
			t.Errorf("run %v: err = %v, want the usage", args, err)
		}
	}
}

func TestLoadSettings(t *testing.T) {
	t.Parallel()
	s, err := loadSettings(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.DatabaseURL != config.DefaultShippingDatabaseURL ||
		s.AMQPURL != config.DefaultAMQPURL || s.HTTPAddr != ":8083" ||
		s.Workers != 8 || s.Prefetch != 32 || s.MaxAttempts != 5 ||
		fmt.Sprint(s.RetryDelays) != "[1s 5s 30s]" || s.MinRetention != 168*time.Hour {
		t.Errorf("defaults = %+v", s)
	}

	s, err = loadSettings(envOf(map[string]string{
		"SHIPPING_WORKERS":      "2",
		"SHIPPING_RETRY_DELAYS": "50ms, 2s",
		"SHIPPING_MAX_ATTEMPTS": "3",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Workers != 2 || s.Prefetch != 8 ||
		s.MaxAttempts != 3 || fmt.Sprint(s.RetryDelays) != "[50ms 2s]" {
		t.Errorf("settings = %+v", s)
	}

	_, err = loadSettings(envOf(map[string]string{
		"SHIPPING_WORKERS":      "many",
		"SHIPPING_PREFETCH":     "0",
		"SHIPPING_MAX_ATTEMPTS": "-1",
		"SHIPPING_RETRY_DELAYS": "1s,1.5ms",
		"LOG_LEVEL":             "loud",
	}))
	var ve *config.VarError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want a *config.VarError", err)
	}
	for _, key := range []string{"SHIPPING_WORKERS", "SHIPPING_PREFETCH", "SHIPPING_MAX_ATTEMPTS", "SHIPPING_RETRY_DELAYS", "LOG_LEVEL"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("err = %v, does not name %s", err, key)
		}
	}
}
