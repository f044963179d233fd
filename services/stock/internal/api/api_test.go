package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/httpx"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/testkit"
	"example.com/shop/services/stock/internal/api"
	"example.com/shop/services/stock/internal/stock"
	"example.com/shop/services/stock/internal/store"
	"example.com/shop/services/stock/migrations"
)

func TestGetReservations(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.FS)
	ctx := testkit.Context(t)
	srv := httptest.NewServer(api.NewHandler(api.New(store.New(pool), nil), nil, prometheus.NewRegistry()))
	t.Cleanup(srv.Close)

	orderID := uuid.New()
	lines := []stock.Line{{ProductID: uuid.New(), Quantity: "1.000"}, {ProductID: uuid.New(), Quantity: "2.500"}}
	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := store.ApplyStatus(ctx, tx, stock.StatusChange{OrderID: orderID, Status: stock.StatusPlaced, Version: 2}); err != nil {
			return err
		}
		rs, err := stock.Reserve(orderID, lines)
		if err != nil {
			return err
		}
		return store.Reserve(ctx, tx, rs)
	})
	if err != nil {
		t.Fatal(err)
	}

	get := func(query string) (*http.Response, []map[string]any) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/reservations" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list []map[string]any
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
				t.Fatal(err)
			}
		}
		return resp, list
	}

	for _, q := range []string{"", "?order_id=", "?order_id=abc", "?order_id={" + orderID.String() + "}"} {
		if resp, _ := get(q); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != httpx.ContentTypeProblem {
			t.Errorf("GET /reservations%s: %d %s, want 400 problem", q, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}

	resp, list := get("?order_id=" + uuid.NewString()) // an order with no reservation
	if resp.StatusCode != http.StatusOK || list == nil || len(list) != 0 {
		t.Errorf("unknown order: %d %v, want 200 []", resp.StatusCode, list)
	}

	resp, list = get("?order_id=" + orderID.String())
	if resp.StatusCode != http.StatusOK || len(list) != 2 {
		t.Fatalf("order: %d %v, want 200 with 2 reservations", resp.StatusCode, list)
	}
	for n, res := range list {
		if res["order_id"] != orderID.String() || res["product_id"] != lines[n].ProductID.String() ||
			res["quantity"] != lines[n].Quantity || res["id"] == "" || len(res) != 4 {
			t.Errorf("reservation %d = %v, want line %v", n, res, lines[n])
		}
	}
}
