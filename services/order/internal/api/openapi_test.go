package api_test

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/order/internal/api"
	"example.com/shop/services/order/internal/order"
	"example.com/shop/services/order/internal/store"
	"example.com/shop/services/order/migrations"
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
	if !strings.HasPrefix(string(spec), "openapi: 3.1.") {
		t.Fatalf("%s does not start with openapi: 3.1.x", openAPIPath)
	}
	return spec
}

// The OpenAPI document and routes.go describe the same operations, both ways.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	r := chi.NewRouter()
	api.New(nil, nil, nil).Routes(r)
	openapitest.CheckRoutes(t, openapitest.Load(t, loadOpenAPI(t)), r)
}

// Every answer of the real API on a real database, success and problem alike, matches
// api/openapi.yaml: status, headers (Retry-After), content type and body schema,
// including the problem type of each status.
func TestResponsesMatchOpenAPI(t *testing.T) {
	t.Parallel()
	pool, url := testkit.NewDatabase(t, migrations.Schema)
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r := httpx.NewRouter(nil, reg)
	api.New(store.New(pool, outbox.NewWriter(v, contracts.ProducerOrder)), nil, reg).Routes(r)
	s := openapitest.NewServer(t, openapitest.Load(t, loadOpenAPI(t)), r)

	jsonBody := http.Header{"Content-Type": {"application/json"}}
	withKey := func(key string) http.Header {
		return http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {key}}
	}
	want := func(got openapitest.Response, status int) {
		t.Helper()
		if got.Status != status {
			t.Fatalf("status %d, want %d: %s", got.Status, status, got.Body)
		}
	}
	create := []byte(createBody(uuid.New(), "2", "0.5"))

	created := s.Do(t, http.MethodPost, "/orders", withKey("k1"), create)
	want(created, http.StatusCreated)
	var o struct{ ID string }
	if err := json.Unmarshal(created.Body, &o); err != nil {
		t.Fatal(err)
	}
	want(s.Do(t, http.MethodPost, "/orders", withKey("k1"), create), http.StatusCreated) // replayed
	want(s.Do(t, http.MethodPost, "/orders", withKey("k1"), []byte(createBody(uuid.New(), "1"))), http.StatusUnprocessableEntity)
	want(s.Do(t, http.MethodPost, "/orders", jsonBody, []byte(`{"Customer_ID":"x"}`)), http.StatusBadRequest)
	want(s.Do(t, http.MethodPost, "/orders", jsonBody, []byte(`{"customer_id":"x","lines":[]}`)), http.StatusUnprocessableEntity)
	want(s.Do(t, http.MethodPost, "/orders", http.Header{"Content-Type": {"text/plain"}}, create), http.StatusUnsupportedMediaType)
	want(s.Do(t, http.MethodPost, "/orders", jsonBody, []byte(`{"customer_id":"`+strings.Repeat("a", httpx.MaxBodyBytes)+`"}`)), http.StatusRequestEntityTooLarge)

	want(s.Do(t, http.MethodGet, "/orders/"+o.ID, nil, nil), http.StatusOK)
	want(s.Do(t, http.MethodGet, "/orders/"+uuid.NewString(), nil, nil), http.StatusNotFound)
	want(s.Do(t, http.MethodGet, "/orders/nope", nil, nil), http.StatusBadRequest)

	want(s.Do(t, http.MethodPost, "/orders/"+o.ID+"/place", withKey("p1"), nil), http.StatusOK)
	want(s.Do(t, http.MethodPost, "/orders/"+o.ID+"/place", withKey("p1"), nil), http.StatusOK) // replayed
	want(s.Do(t, http.MethodPost, "/orders/"+o.ID+"/place", nil, nil), http.StatusConflict)
	want(s.Do(t, http.MethodPost, "/orders/"+uuid.NewString()+"/place", nil, nil), http.StatusNotFound)
	want(s.Do(t, http.MethodPost, "/orders/"+o.ID+"/place", http.Header{"Idempotency-Key": {"has space"}}, nil), http.StatusBadRequest)
	want(s.Do(t, http.MethodPost, "/orders/"+o.ID+"/cancel", jsonBody, []byte(`{"x":1}`)), http.StatusBadRequest)
	want(s.Do(t, http.MethodPost, "/orders/"+o.ID+"/cancel", http.Header{"Content-Type": {"text/plain"}}, []byte(`{}`)), http.StatusUnsupportedMediaType)
	want(s.Do(t, http.MethodPost, "/orders/"+o.ID+"/cancel", jsonBody, []byte(`{"x":"`+strings.Repeat("a", httpx.MaxBodyBytes)+`"}`)), http.StatusRequestEntityTooLarge)
	want(s.Do(t, http.MethodPost, "/orders/"+o.ID+"/place", http.Header{"Content-Type": {"application/json; charset=latin1"}}, []byte(`{}`)), http.StatusUnsupportedMediaType)
	want(s.Do(t, http.MethodPost, "/orders/"+o.ID+"/cancel", jsonBody, []byte(`{}`)), http.StatusOK)
	want(s.Do(t, http.MethodPost, "/orders/"+o.ID+"/cancel", nil, nil), http.StatusConflict)
	want(s.Do(t, http.MethodPost, "/orders/"+o.ID+"/cancel", withKey("p1"), nil), http.StatusUnprocessableEntity)

	// Stock's answers: a confirmed order and a rejected one with its rejection, as GET and
	// cancel show them.
	st := store.New(pool, outbox.NewWriter(v, contracts.ProducerOrder))
	answered := func(confirm bool) string {
		created := s.Do(t, http.MethodPost, "/orders", jsonBody, []byte(createBody(uuid.New(), "3")))
		want(created, http.StatusCreated)
		var o struct{ ID string }
		if err := json.Unmarshal(created.Body, &o); err != nil {
			t.Fatal(err)
		}
		want(s.Do(t, http.MethodPost, "/orders/"+o.ID+"/place", nil, nil), http.StatusOK)
		err := st.Update(testkit.Context(t), uuid.MustParse(o.ID), func(ord *order.Order) error {
			if confirm {
				return ord.Confirm(2, time.Now())
			}
			return ord.Reject(2, order.Rejection{Reason: contracts.RejectionInsufficientStock, Lines: []order.ShortLine{
				{ProductID: ord.Lines()[0].ProductID, Requested: ord.Lines()[0].Quantity, Available: "0.000"}}}, time.Now())
		})
		if err != nil {
			t.Fatal(err)
		}
		return o.ID
	}
	confirmed, rejected := answered(true), answered(false)
	want(s.Do(t, http.MethodGet, "/orders/"+confirmed, nil, nil), http.StatusOK)
	got := s.Do(t, http.MethodGet, "/orders/"+rejected, nil, nil)
	want(got, http.StatusOK)
	if !strings.Contains(string(got.Body), `"status":"rejected"`) || !strings.Contains(string(got.Body), `"rejection":{"reason":"insufficient_stock","lines":[{"product_id":`) ||
		!strings.Contains(string(got.Body), `"requested":"3.000","available":"0.000"}]}`) {
		t.Errorf("a rejected order: %s", got.Body)
	}
	want(s.Do(t, http.MethodPost, "/orders/"+rejected+"/cancel", nil, nil), http.StatusConflict)
	cancelled := s.Do(t, http.MethodPost, "/orders/"+confirmed+"/cancel", nil, nil)
	want(cancelled, http.StatusOK)
	if !strings.Contains(string(cancelled.Body), `"status":"cancelled","version":4`) || strings.Contains(string(cancelled.Body), "rejection") {
		t.Errorf("a confirmed order cancelled: %s", cancelled.Body)
	}

	testkit.RefuseConnections(t, url)
	want(s.Do(t, http.MethodGet, "/orders/"+o.ID, nil, nil), http.StatusServiceUnavailable)
	want(s.Do(t, http.MethodPost, "/orders", jsonBody, create), http.StatusServiceUnavailable)
}
