package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"example.com/shop/platform/config"
	"example.com/shop/platform/consumerapp"
	"example.com/shop/platform/consumerapp/consumerapptest"
	"example.com/shop/platform/testkit"
)

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// TestServe runs `shipping migrate` and `shipping serve` in process with SHIPPING_*
// settings on a fresh database and vhost, publishes a placed event to app.events and
// reads the result over HTTP; consumerapptest checks the clean shutdown and that the
// logs hold no error and no broker password.
func TestServe(t *testing.T) {
	t.Parallel()
	amqpURL := testkit.NewVhost(t)
	vars := map[string]string{
		"SHIPPING_DATABASE_URL": testkit.EmptyDatabaseURL(t),
		"AMQP_URL":              amqpURL,
		"SHIPPING_WORKERS":      "2",
		"SHIPPING_RETRY_DELAYS": "50ms,100ms",
	}
	if out := consumerapptest.Migrate(t, spec(), vars); !strings.Contains(out, `"msg":"database is up to date","service":"shipping-migrate"`) || !strings.Contains(out, `"applied":6}`) {
		t.Errorf("migrate said %q", out)
	}
	srv := consumerapptest.Start(t, spec(), vars)

	envl, p := consumerapptest.Placed(t, "1.000")
	orderID := p.OrderID
	consumerapptest.Publish(t, amqpURL, envl)

	var status struct {
		OrderID string `json:"order_id"`
		Status  string `json:"status"`
		Version int    `json:"version"`
	}
	consumerapptest.GetJSON(t, srv.URL+"/order-status/"+orderID.String(), http.StatusOK, &status)
	if status.OrderID != orderID.String() || status.Status != "placed" || status.Version != 2 {
		t.Errorf("order status = %+v, want placed v2", status)
	}
	var shipment struct {
		Status string `json:"status"`
	}
	consumerapptest.GetJSON(t, srv.URL+"/shipments/"+orderID.String(), http.StatusOK, &shipment)
	if shipment.Status != "ready" {
		t.Errorf("shipment status = %q, want ready", shipment.Status)
	}
	_, metrics := consumerapptest.Get(t, srv.URL+"/metrics")
	for _, want := range []string{`inbox_processed_total{consumer="shipping"} 1`, "http_requests_total", "go_goroutines"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	srv.Stop(t)
}

// TestSettings: shipping keeps its defaults (the database and port of docs/operations.md, 8 workers,
// no inbox group commit) and names its bad SHIPPING_* variables.
func TestSettings(t *testing.T) {
	t.Parallel()
	s, err := consumerapp.LoadSettings(spec(), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.DatabaseURL != config.DefaultShippingDatabaseURL ||
		s.AMQPURL != config.DefaultAMQPURL || s.HTTPAddr != ":8083" ||
		s.Workers != 8 || s.Prefetch != 32 || s.InboxGroup != 1 || s.MaxAttempts != 5 ||
		fmt.Sprint(s.RetryDelays) != "[1s 5s 30s]" || s.MinRetention != 168*time.Hour {
		t.Errorf("defaults = %+v", s)
	}

	_, err = consumerapp.LoadSettings(spec(), envOf(map[string]string{
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

func TestCommandLine(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"shipping"}, {"shipping", "ship-it"}} {
		err := consumerapp.Run(context.Background(), spec(), args, envOf(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "usage: shipping") {
			t.Errorf("run %v: err = %v, want the usage", args, err)
		}
	}
}
