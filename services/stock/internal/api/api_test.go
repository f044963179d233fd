package api_test

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/httpx"
	"example.com/shop/platform/pg"
	"example.com/shop/services/stock/internal/api"
	"example.com/shop/services/stock/internal/stock"
	"example.com/shop/services/stock/internal/store"
	"example.com/shop/services/stock/migrations"
	"example.com/shop/testkit"
	"example.com/shop/testkit/openapitest"
)

const openAPIPath = "../../api/openapi.yaml"

func loadOpenAPI(t *testing.T) []byte {
	t.Helper()
	spec, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// The OpenAPI document and routes.go describe the same operations, both ways.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	r := chi.NewRouter()
	api.New(nil, nil).Routes(r)
	openapitest.CheckRoutes(t, openapitest.Load(t, loadOpenAPI(t)), r)
}

type reservationJSON struct {
	ID        string `json:"id"`
	OrderID   string `json:"order_id"`
	ProductID string `json:"product_id"`
	Quantity  string `json:"quantity"`
	Status    string `json:"status"`
}

// testGetReservations reads real rows through the real handler: held reservations, then
// the same ones released by a cancel, an unknown order and bad parameters. Every answer must also match api/openapi.yaml (openapitest).
func testGetReservations(t *testing.T, pool *pgxpool.Pool, srv *openapitest.Server) {
	ctx := testkit.Context(t)

	orderID := uuid.New()
	lines := []stock.Line{{ProductID: uuid.New(), Quantity: "1.000"}, {ProductID: uuid.New(), Quantity: "2.500"}}
	apply := func(status stock.Status, version int, then func(pgx.Tx) error) {
		t.Helper()
		err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
			if _, err := store.ApplyStatus(ctx, tx, stock.StatusChange{OrderID: orderID, Status: status, Version: version}); err != nil {
				return err
			}
			return then(tx)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	apply(stock.StatusPlaced, 2, func(tx pgx.Tx) error {
		_, _, err := store.Reserve(ctx, tx, orderID, lines)
		return err
	})

	list := func(query string, status int) []reservationJSON {
		t.Helper()
		r := srv.Do(t, http.MethodGet, "/reservations"+query, nil, nil)
		if r.Status != status {
			t.Fatalf("GET /reservations%s: %d %s, want %d", query, r.Status, r.Body, status)
		}
		if status != http.StatusOK {
			var p httpx.Problem
			if err := json.Unmarshal(r.Body, &p); err != nil {
				t.Fatal(err)
			}
			if status == http.StatusBadRequest && (len(p.Errors) != 1 || p.Errors[0].Parameter != "order_id") {
				t.Errorf("GET /reservations%s: errors %+v, want order_id named", query, p.Errors)
			}
			return nil
		}
		var out []reservationJSON
		if err := json.Unmarshal(r.Body, &out); err != nil || out == nil {
			t.Fatalf("GET /reservations%s: %s (%v), want a JSON array", query, r.Body, err)
		}
		return out
	}
	check := func(got []reservationJSON, status string) {
		t.Helper()
		if len(got) != len(lines) {
			t.Fatalf("reservations = %+v, want %d", got, len(lines))
		}
		for n, res := range got {
			if res.OrderID != orderID.String() || res.ProductID != lines[n].ProductID.String() ||
				res.Quantity != lines[n].Quantity || res.ID == "" || res.Status != status {
				t.Errorf("reservation %d = %+v, want line %v %s", n, res, lines[n], status)
			}
		}
	}

	for _, q := range []string{"", "?order_id=", "?order_id=abc", "?order_id={" + orderID.String() + "}",
		"?order_id=" + orderID.String() + "&order_id=" + orderID.String()} {
		list(q, http.StatusBadRequest)
	}
	if got := list("?order_id="+uuid.NewString(), http.StatusOK); len(got) != 0 {
		t.Errorf("unknown order: %+v, want []", got)
	}
	check(list("?order_id="+orderID.String(), http.StatusOK), "held")

	apply(stock.StatusCancelled, 3, func(tx pgx.Tx) error { return store.Release(ctx, tx, orderID) })
	check(list("?order_id="+orderID.String(), http.StatusOK), "released")
}

// TestAPI runs the tests of each route on one server, whose every operation must be
// called, then checks that each answers 503 while the database refuses connections.
func TestAPI(t *testing.T) {
	t.Parallel()
	pool, url := testkit.NewDatabase(t, migrations.Schema)
	srv := openapitest.NewServer(t, openapitest.Load(t, loadOpenAPI(t)),
		api.NewHandler(api.New(store.New(pool), nil), nil, prometheus.NewRegistry()))
	t.Run("reservations", func(t *testing.T) { testGetReservations(t, pool, srv) })
	t.Run("product stock", func(t *testing.T) { testProductStock(t, pool, srv) })

	testkit.RefuseConnections(t, url)
	for _, path := range []string{"/reservations?order_id=" + uuid.NewString(), "/products/" + uuid.NewString() + "/stock"} {
		if r := srv.Do(t, http.MethodGet, path, nil, nil); r.Status != http.StatusServiceUnavailable {
			t.Errorf("GET %s with the database down: %d %s, want 503", path, r.Status, r.Body)
		}
	}
	r := srv.Do(t, http.MethodPut, "/products/"+uuid.NewString()+"/stock", http.Header{"Content-Type": {"application/json"}}, []byte(`{"on_hand": "1"}`))
	if r.Status != http.StatusServiceUnavailable {
		t.Errorf("PUT with the database down: %d %s, want 503", r.Status, r.Body)
	}
}

// testProductStock sets and reads a product's stock through the real handlers: 404 while
// untracked, 200 once PUT created its row, reserved and available following a placed
// order, 409 below what is held, and precise 400 and 422 answers for bad input. Every
// answer must also match api/openapi.yaml (openapitest).
func testProductStock(t *testing.T, pool *pgxpool.Pool, srv *openapitest.Server) {
	ctx := testkit.Context(t)
	product := uuid.New()
	path := "/products/" + product.String() + "/stock"
	jsonHeader := http.Header{"Content-Type": {"application/json"}}
	type stockJSON struct {
		ProductID, OnHand, Reserved, Available string
	}
	do := func(method, path, body string, status int) (stockJSON, httpx.Problem) {
		t.Helper()
		var b []byte
		if body != "" {
			b = []byte(body)
		}
		r := srv.Do(t, method, path, jsonHeader, b)
		if r.Status != status {
			t.Fatalf("%s %s %s: %d %s, want %d", method, path, body, r.Status, r.Body, status)
		}
		var got struct {
			ProductID string `json:"product_id"`
			OnHand    string `json:"on_hand"`
			Reserved  string `json:"reserved"`
			Available string `json:"available"`
		}
		var p httpx.Problem
		if status == http.StatusOK {
			if err := json.Unmarshal(r.Body, &got); err != nil {
				t.Fatal(err)
			}
		} else if err := json.Unmarshal(r.Body, &p); err != nil {
			t.Fatal(err)
		}
		return stockJSON{got.ProductID, got.OnHand, got.Reserved, got.Available}, p
	}
	want := func(got stockJSON, onHand, reserved, available string) {
		t.Helper()
		if got != (stockJSON{product.String(), onHand, reserved, available}) {
			t.Errorf("stock = %+v, want on hand %s, reserved %s, available %s", got, onHand, reserved, available)
		}
	}

	do(http.MethodGet, path, "", http.StatusNotFound)
	got, _ := do(http.MethodPut, path, `{"on_hand": "10"}`, http.StatusOK)
	want(got, "10.000", "0.000", "10.000")
	orderID := uuid.New()
	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := store.ApplyStatus(ctx, tx, stock.StatusChange{OrderID: orderID, Status: stock.StatusPlaced, Version: 2}); err != nil {
			return err
		}
		_, short, err := store.Reserve(ctx, tx, orderID, []stock.Line{{ProductID: product, Quantity: "7.5"}})
		if short != nil {
			t.Errorf("short: %+v", short)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = do(http.MethodGet, path, "", http.StatusOK)
	want(got, "10.000", "7.500", "2.500")
	if _, p := do(http.MethodPut, path, `{"on_hand": "7.499"}`, http.StatusConflict); len(p.Errors) != 1 || p.Errors[0].Pointer != "/on_hand" {
		t.Errorf("409 errors = %+v, want /on_hand", p.Errors)
	}
	got, _ = do(http.MethodPut, path, `{"on_hand": "7.500"}`, http.StatusOK)
	want(got, "7.500", "7.500", "0.000")

	for _, body := range []string{`{"on_hand": "-1"}`, `{"on_hand": "1.2345"}`, `{"on_hand": "1e3"}`, `{"on_hand": ""}`,
		`{"on_hand": "1000000000"}`} {
		if _, p := do(http.MethodPut, path, body, http.StatusUnprocessableEntity); len(p.Errors) != 1 || p.Errors[0].Pointer != "/on_hand" {
			t.Errorf("PUT %s: errors = %+v, want /on_hand", body, p.Errors)
		}
	}
	for _, body := range []string{`{"on_hand": 10}`, `{"on_hand": "1", "reserved": "0"}`, `[]`, `{`} {
		do(http.MethodPut, path, body, http.StatusBadRequest)
	}
	do(http.MethodPut, path, `{"on_hand": "`+strings.Repeat("1", httpx.MaxBodyBytes)+`"}`, http.StatusRequestEntityTooLarge)
	do(http.MethodGet, "/products/abc/stock", "", http.StatusBadRequest)
	do(http.MethodPut, "/products/abc/stock", `{"on_hand": "1"}`, http.StatusBadRequest)
	do(http.MethodPut, "/products/"+uuid.Nil.String()+"/stock", `{"on_hand": "1"}`, http.StatusBadRequest) // names no product
}
