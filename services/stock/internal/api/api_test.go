package api_test

import (
	"encoding/json"
	"net/http"
	"os"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/httpx"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/testkit"
	"example.com/shop/platform/testkit/openapitest"
	"example.com/shop/services/stock/internal/api"
	"example.com/shop/services/stock/internal/stock"
	"example.com/shop/services/stock/internal/store"
	"example.com/shop/services/stock/migrations"
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

// TestGetReservations reads real rows through the real handler: held reservations, then
// the same ones released by a cancel, an unknown order, bad parameters and a database
// outage. Every answer must also match api/openapi.yaml (openapitest).
func TestGetReservations(t *testing.T) {
	t.Parallel()
	pool, url := testkit.NewDatabase(t, migrations.Schema)
	ctx := testkit.Context(t)
	srv := openapitest.NewServer(t, openapitest.Load(t, loadOpenAPI(t)),
		api.NewHandler(api.New(store.New(pool), nil), nil, prometheus.NewRegistry()))

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
		rs, err := stock.Reserve(orderID, lines)
		if err != nil {
			return err
		}
		return store.Reserve(ctx, tx, rs)
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

	testkit.RefuseConnections(t, url)
	list("?order_id="+orderID.String(), http.StatusServiceUnavailable)
}
