package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/order/internal/api"
	"example.com/shop/services/order/internal/store"
	"example.com/shop/services/order/migrations"
	"example.com/shop/testkit"
)

// BenchmarkCreateAndPlace measures the order API's own work per order: POST /orders
// then POST /orders/{id}/place with an Idempotency-Key, through the router serve
// mounts (request ids, JSON logs at info level to a discarded writer, metrics) on a
// real database, handler called in process (no network). Profile it with
// -cpuprofile to see where the API's CPU per order goes; the database server's CPU is
// not in it.
func BenchmarkCreateAndPlace(b *testing.B) {
	pool, _ := testkit.NewDatabase(b, migrations.Schema)
	v, err := contracts.NewValidator()
	if err != nil {
		b.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	r := httpx.NewRouter(logger, reg)
	api.New(store.New(pool, outbox.NewWriter(v, contracts.ProducerOrder)), logger, reg).Routes(r)
	body := []byte(fmt.Sprintf(`{"customer_id":%q,"lines":[{"product_id":%q,"quantity":"1"},{"product_id":%q,"quantity":"2.5"}]}`,
		uuid.NewString(), uuid.NewString(), uuid.NewString()))
	post := func(path string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", uuid.NewString())
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		return rec
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rec := post("/orders", body)
		var o struct {
			ID string `json:"id"`
		}
		if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &o) != nil {
			b.Fatalf("POST /orders = %d %s", rec.Code, rec.Body)
		}
		if rec := post("/orders/"+o.ID+"/place", nil); rec.Code != http.StatusOK {
			b.Fatalf("POST place = %d %s", rec.Code, rec.Body)
		}
	}
}
