package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/platform/config"
	"example.com/shop/services/shipping/migrations"
	"example.com/shop/testkit"
	"example.com/shop/testkit/servetest"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// TestServe runs `shipping migrate` and `shipping serve` in process on a fresh
// database and vhost, publishes a placed event to app.events and reads the result over
// HTTP; servetest checks the clean shutdown and that the logs hold no error and no
// broker password.
func TestServe(t *testing.T) {
	t.Parallel()
	amqpURL := testkit.NewVhost(t)
	vars := map[string]string{
		"SHIPPING_DATABASE_URL": testkit.EmptyDatabaseURL(t),
		"AMQP_URL":              amqpURL,
		"SHIPPING_WORKERS":      "2",
		"SHIPPING_RETRY_DELAYS": "50ms,100ms",
	}
	if out := servetest.Migrate(t, run, "shipping", vars); !strings.Contains(out, `"msg":"database is up to date","service":"shipping-migrate"`) || !strings.Contains(out, `"applied":10}`) {
		t.Errorf("migrate said %q", out)
	}
	srv := servetest.Start(t, run, "shipping", vars)

	envl, p := servetest.Placed(t, "1.000")
	orderID := p.OrderID
	servetest.Publish(t, amqpURL, envl)

	var status struct {
		OrderID string `json:"order_id"`
		Status  string `json:"status"`
		Version int    `json:"version"`
	}
	servetest.GetJSON(t, srv.URL+"/order-status/"+orderID.String(), http.StatusOK, &status)
	if status.OrderID != orderID.String() || status.Status != "placed" || status.Version != 2 {
		t.Errorf("order status = %+v, want placed v2", status)
	}
	var shipment struct {
		Status string `json:"status"`
	}
	servetest.GetJSON(t, srv.URL+"/shipments/"+orderID.String(), http.StatusOK, &shipment)
	if shipment.Status != "pending" {
		t.Errorf("shipment status = %q, want pending (placed, not yet confirmed)", shipment.Status)
	}

	_, metrics := servetest.Get(t, srv.URL+"/metrics")
	for _, want := range []string{`inbox_processed_total{consumer="shipping"} 1`,
		`amqp_consumer_processed_total{consumer="shipping",queue="shipping.events"} 1`, "http_requests_total", "go_goroutines"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	srv.Stop(t)
}

// TestServeWaitsForTheDatabase: with the database unreachable serve answers /healthz,
// reports itself not ready, refuses the API with 503, and stops cleanly on ctx's end.
func TestServeWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &testkit.Logs{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	vars := map[string]string{
		"SHIPPING_DATABASE_URL": "postgres://postgres:secret@127.0.0.1:1/shipping?sslmode=disable",
		"AMQP_URL":              "amqp://guest:guest@127.0.0.1:1/",
		"HTTP_ADDR":             addr,
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"shipping", "serve"}, env(vars), io.Discard, logs) }()
	base := "http://" + addr
	servetest.GetJSON(t, base+"/healthz", http.StatusOK, nil)
	if status, body := servetest.Get(t, base+"/readyz"); status != http.StatusServiceUnavailable || !strings.Contains(body, "postgres") {
		t.Errorf("GET /readyz = %d %s, want 503 naming postgres", status, body)
	}
	if status, body := servetest.Get(t, base+"/order-status/"+uuid.NewString()); status != http.StatusServiceUnavailable {
		t.Errorf("GET /order-status = %d %s, want 503 while starting", status, body)
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

// TestPurgeInbox deletes shipping's keys older than the horizon and refuses one
// below INBOX_MIN_RETENTION.
func TestPurgeInbox(t *testing.T) {
	t.Parallel()
	pool, dbURL := testkit.NewDatabase(t, migrations.Schema)
	ctx := testkit.Context(t)
	_, err := pool.Exec(ctx, `INSERT INTO processed_event (consumer, message_key, processed_at) VALUES
		('shipping', $1, now() - interval '300 hours'),
		('shipping', $2, now() - interval '1 hour'),
		('other', $3, now() - interval '300 hours')`,
		uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()))
	if err != nil {
		t.Fatal(err)
	}
	vars := env(map[string]string{"SHIPPING_DATABASE_URL": dbURL})
	var out bytes.Buffer
	if err := run(ctx, []string{"shipping", "purge-inbox", "--older-than", "170h"}, vars, &out, io.Discard); err != nil ||
		!strings.HasPrefix(out.String(), "purged 1 processed_event keys") {
		t.Fatalf("purge: %q, %v", out.String(), err)
	}
	if err := run(ctx, []string{"shipping", "purge-inbox", "--older-than", "1h"}, vars, &out, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "shorter than INBOX_MIN_RETENTION") {
		t.Errorf("purge below the minimum retention: err = %v", err)
	}
}

// TestConfig: shipping keeps its defaults (database, port :8083, 256 workers, inbox
// groups of 128, 2 at once) and names its bad SHIPPING_* variables.
func TestConfig(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(nil), service.LoadServeConfig)
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://postgres@localhost:5432/shipping?sslmode=disable" ||
		c.AMQPURL != config.DefaultAMQPURL || c.HTTPAddr != ":8083" ||
		c.Workers != 256 || c.Prefetch != 1024 || c.InboxGroup != 128 || c.InboxTx != 2 || c.MaxAttempts != 5 ||
		fmt.Sprint(c.RetryDelays) != "[1s 5s 30s]" || c.MinRetention != 168*time.Hour || c.PoolSize() != 6 {
		t.Errorf("defaults = %+v", c)
	}
	_, err = config.Load(env(map[string]string{
		"SHIPPING_WORKERS":      "many",
		"SHIPPING_PREFETCH":     "0",
		"SHIPPING_MAX_ATTEMPTS": "-1",
		"SHIPPING_RETRY_DELAYS": "1s,1.5ms",
		"LOG_LEVEL":             "loud",
		"SHIPPING_DATABASE_URL": "::bad",
		"AMQP_URL":              "http://u:secret@host/",
	}), service.LoadServeConfig)
	var ve *config.VarError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want a *config.VarError", err)
	}
	for _, key := range []string{"SHIPPING_WORKERS", "SHIPPING_PREFETCH", "SHIPPING_MAX_ATTEMPTS", "SHIPPING_RETRY_DELAYS", "LOG_LEVEL", "SHIPPING_DATABASE_URL", "AMQP_URL"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("err = %v, does not name %s", err, key)
		}
	}
}
