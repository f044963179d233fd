package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"example.com/shop/services/auditor/internal/store/storetest"
	"example.com/shop/testkit"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestHelpVersionAndBadInput(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"serve", "--help"}} {
		var out bytes.Buffer
		if err := run(ctx, append([]string{"auditor"}, args...), env(nil), &out, io.Discard); err != nil || !strings.Contains(out.String(), "usage: auditor") || !strings.Contains(out.String(), "serve") {
			t.Errorf("%v: %v, %q", args, err, out.String())
		}
	}
	for _, args := range [][]string{{"--version"}, {"serve", "--version"}} {
		var out bytes.Buffer
		if err := run(ctx, append([]string{"auditor"}, args...), env(nil), &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "auditor ") {
			t.Errorf("%v: %v, %q", args, err, out.String())
		}
	}
	if err := run(ctx, []string{"auditor", "audit"}, env(nil), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), `unknown command "audit"`) {
		t.Errorf("unknown command: %v", err)
	}
	err := run(ctx, []string{"auditor", "serve"}, env(map[string]string{"AUDIT_GRACE": "soon", "AUDIT_WINDOW": "-1m"}), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "AUDIT_GRACE") || !strings.Contains(err.Error(), "AUDIT_WINDOW") {
		t.Errorf("bad settings: %v", err)
	}
}

// TestServeAnswersEveryRoute runs `auditor serve` in-process on three migrated
// databases and calls each route once.
func TestServeAnswersEveryRoute(t *testing.T) {
	order, stock, shipping := storetest.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"auditor", "serve"}, env(map[string]string{
			"AUDITOR_ORDER_DATABASE_URL":    order.URL,
			"AUDITOR_STOCK_DATABASE_URL":    stock.URL,
			"AUDITOR_SHIPPING_DATABASE_URL": shipping.URL,
			"AMQP_URL":                      testkit.AMQPURL(t),
			"HTTP_ADDR":                     addr,
			"AUDIT_INTERVAL":                "100ms",
		}), io.Discard, io.Discard)
	}()
	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		if status, _ := get(t, base+"/readyz"); status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not ready within 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range []struct {
		path   string
		status int
		want   string
	}{
		{"/", 200, "shop auditor"},
		{"/static/page.js", 200, "/board"},
		{"/static/page.css", 200, "td.stage"},
		{"/static/nothing.js", 404, ""},
		{"/openapi.yaml", 200, "/orders/{id}/journey"},
		{"/audit", 200, `"unaccounted":{"order":0,"shipping":0,"stock":0}`},
		{"/audit", 200, `"unanswered":0`},
		{"/board", 200, `"orders":[]`},
		{"/metrics", 200, `delivery_unaccounted_events{consumer="stock"} 0`},
		{"/metrics", 200, `delivery_audited_events_total{producer="stock"} 0`},
		{"/metrics", 200, "delivery_unanswered_orders 0"},
		{"/orders/not-a-uuid/journey", 400, `"parameter":"id"`},
		{"/orders/0190a4b2-7c3e-7000-8000-000000000001/journey", 404, "not found"},
		{"/events/0190a4b2-7c3e-7000-8000-000000000001/journey", 404, "not found"},
	} {
		status, body := get(t, base+c.path)
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d %.300s; want %d with %q", c.path, status, body, c.status, c.want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop within 15 s")
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
