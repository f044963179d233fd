package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/testkit"
	"example.com/shop/services/stock/internal/reservation"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestPurgeInboxRefusesAShortHorizon(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	for _, tc := range []struct {
		args []string
		vars map[string]string
		want string
	}{
		{[]string{"stock", "purge-inbox", "--older-than", "1h"}, nil, "shorter than INBOX_MIN_RETENTION (168h0m0s)"},
		{[]string{"stock", "purge-inbox", "--older-than", "47h"}, map[string]string{"INBOX_MIN_RETENTION": "48h"}, "shorter than INBOX_MIN_RETENTION (48h0m0s)"},
		{[]string{"stock", "purge-inbox"}, nil, "--older-than DURATION is required"},
		{[]string{"stock", "purge-inbox", "--older-than", "soon"}, nil, "invalid value"},
		{[]string{"stock", "purge-inbox", "--older-than", "200h"}, map[string]string{"INBOX_MIN_RETENTION": "-1h"}, "INBOX_MIN_RETENTION"},
	} {
		err := run(ctx, tc.args, env(tc.vars), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %v: err = %v, want it to mention %q", tc.args[1:], err, tc.want)
		}
	}
}

func TestBadSettingsAreNamed(t *testing.T) {
	t.Parallel()
	err := run(testkit.Context(t), []string{"stock", "serve"},
		env(map[string]string{"STOCK_WORKERS": "many", "STOCK_RETRY_DELAYS": "1s,0.5ms"}), io.Discard, io.Discard)
	for _, want := range []string{"STOCK_WORKERS", "STOCK_RETRY_DELAYS"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to name %s", err, want)
		}
	}
}

func TestMigrateThenPurgeInbox(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	vars := map[string]string{"STOCK_DATABASE_URL": testkit.EmptyDatabaseURL(t)}
	var out bytes.Buffer
	for range 2 { // the second run finds nothing to do
		if err := run(ctx, []string{"stock", "migrate"}, env(vars), &out, io.Discard); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	if !strings.Contains(out.String(), "up to date") {
		t.Errorf("migrate output = %q", out.String())
	}

	out.Reset()
	err := run(ctx, []string{"stock", "purge-inbox", "--older-than", "168h"}, env(vars), &out, io.Discard)
	if err != nil || !strings.Contains(out.String(), "purged 0 processed_event keys") {
		t.Errorf("purge-inbox: %v, output %q", err, out.String())
	}
}

func TestServeConsumesAndAnswersHTTP(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(testkit.Context(t))
	defer cancel()
	addr := freeAddr(t)
	amqpURL := testkit.NewVhost(t)
	vars := map[string]string{
		"STOCK_DATABASE_URL": testkit.EmptyDatabaseURL(t),
		"AMQP_URL":           amqpURL,
		"HTTP_ADDR":          addr,
		"STOCK_RETRY_DELAYS": "50ms,100ms",
	}
	if err := run(ctx, []string{"stock", "migrate"}, env(vars), io.Discard, io.Discard); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	var logs bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"stock", "serve"}, env(vars), io.Discard, &logs) }()

	base := "http://" + addr
	waitFor(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// Publish one placed event the way the relay does.
	conn, err := amqp.Dial(ctx, amqpURL, reservation.Topology([]time.Duration{50 * time.Millisecond, 100 * time.Millisecond}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	orderID := uuid.New()
	e, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, "corr", contracts.OrderPlaced{
		OrderID: orderID, CustomerID: uuid.New(), Version: 2,
		Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "2.000"}},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(e)
	pub := amqp.NewPublisher(conn, contracts.Exchange)
	defer pub.Close()
	if err := pub.PublishOne(ctx, amqp.Message{RoutingKey: e.EventName, Type: e.EventName, MessageID: e.EventID.String(), Body: body}, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	var list []map[string]string
	waitFor(t, func() bool {
		resp, err := http.Get(base + "/reservations?order_id=" + orderID.String())
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		list = nil
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&list) == nil && len(list) == 1
	})
	if list[0]["quantity"] != "2.000" || list[0]["order_id"] != orderID.String() {
		t.Errorf("reservation = %v", list[0])
	}

	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`inbox_processed_total{consumer="stock"} 1`, `amqp_consumer_processed_total{consumer="stock",queue="stock.events"} 1`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve returned %v after shutdown, want nil", err)
	}
	if strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Errorf("serve logged errors:\n%s", logs.String())
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
