package reservation_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/httpx"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/testkit"
	"example.com/shop/services/stock/internal/reservation"
	"example.com/shop/services/stock/migrations"
)

func TestGetReservations(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.FS)
	ctx := testkit.Context(t)
	r := httpx.NewRouter(nil, prometheus.NewRegistry())
	reservation.Routes(r, pool, nil)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	s := &system{t: t}
	env, p := s.placed(2)
	if err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error { return reservation.OnOrderPlaced(ctx, tx, env) }); err != nil {
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

	for _, q := range []string{"", "?order_id=", "?order_id=abc", "?order_id={" + p.OrderID.String() + "}"} {
		if resp, _ := get(q); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != httpx.ContentTypeProblem {
			t.Errorf("GET /reservations%s: %d %s, want 400 problem", q, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}

	resp, list := get("?order_id=" + env.EventID.String()) // an order with no reservation
	if resp.StatusCode != http.StatusOK || list == nil || len(list) != 0 {
		t.Errorf("unknown order: %d %v, want 200 []", resp.StatusCode, list)
	}

	resp, list = get("?order_id=" + p.OrderID.String())
	if resp.StatusCode != http.StatusOK || len(list) != 2 {
		t.Fatalf("order: %d %v, want 200 with 2 reservations", resp.StatusCode, list)
	}
	for n, res := range list {
		if res["order_id"] != p.OrderID.String() || res["product_id"] != p.Lines[n].ProductID.String() ||
			res["quantity"] != p.Lines[n].Quantity || res["id"] == "" || len(res) != 4 {
			t.Errorf("reservation %d = %v, want line %v", n, res, p.Lines[n])
		}
	}
}
