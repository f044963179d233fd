package main

import (
	"context"
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

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestServeConsumesAndAnswersHTTP runs `stock migrate` and `stock serve` in process
// with STOCK_* settings on a fresh database and vhost, publishes a placed event the
// way the relay does and reads the reservation over HTTP; consumerapptest checks the
// clean shutdown and that nothing was logged at ERROR level.
func TestServeConsumesAndAnswersHTTP(t *testing.T) {
	t.Parallel()
	amqpURL := testkit.NewVhost(t)
	vars := map[string]string{
		"STOCK_DATABASE_URL": testkit.EmptyDatabaseURL(t),
		"AMQP_URL":           amqpURL,
		"STOCK_RETRY_DELAYS": "50ms,100ms",
	}
	if out := consumerapptest.Migrate(t, spec(), vars); !strings.Contains(out, `"msg":"database is up to date","service":"stock-migrate"`) || !strings.Contains(out, `"applied":6}`) {
		t.Errorf("migrate said %q", out)
	}
	srv := consumerapptest.Start(t, spec(), vars)

	e, p := consumerapptest.Placed(t, "2.000")
	orderID := p.OrderID
	consumerapptest.Publish(t, amqpURL, e)

	var list []map[string]string
	deadline := time.Now().Add(60 * time.Second)
	for len(list) != 1 && time.Now().Before(deadline) {
		consumerapptest.GetJSON(t, srv.URL+"/reservations?order_id="+orderID.String(), http.StatusOK, &list)
		time.Sleep(20 * time.Millisecond)
	}
	if len(list) != 1 || list[0]["quantity"] != "2.000" || list[0]["order_id"] != orderID.String() {
		t.Fatalf("reservations = %v, want one of 2.000 for order %s", list, orderID)
	}

	_, m := consumerapptest.Get(t, srv.URL+"/metrics")
	for _, want := range []string{`inbox_processed_total{consumer="stock"} 1`, `amqp_consumer_processed_total{consumer="stock",queue="stock.events"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	srv.Stop(t)
}

// TestDefaults: stock keeps its defaults (the database and port of docs/operations.md, 32 workers,
// inbox group commit 16 x 2).
func TestDefaults(t *testing.T) {
	t.Parallel()
	s, err := consumerapp.LoadSettings(spec(), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.DatabaseURL != config.DefaultStockDatabaseURL || s.HTTPAddr != ":8082" ||
		s.Workers != 32 || s.Prefetch != 128 || s.InboxGroup != 16 || s.InboxTx != 2 || s.MaxAttempts != 5 {
		t.Errorf("defaults = %+v", s)
	}
}

func TestBadSettingsAreNamed(t *testing.T) {
	t.Parallel()
	err := consumerapp.Run(context.Background(), spec(), []string{"stock", "serve"},
		env(map[string]string{"STOCK_WORKERS": "many", "STOCK_RETRY_DELAYS": "1s,0.5ms"}), io.Discard, io.Discard)
	for _, want := range []string{"STOCK_WORKERS", "STOCK_RETRY_DELAYS"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to name %s", err, want)
		}
	}
}
