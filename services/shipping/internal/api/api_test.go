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
	"github.com/jackc/pgx/v5"

	"example.com/shop/platform/httpx"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/pg"
	"example.com/shop/services/shipping/internal/api"
	"example.com/shop/services/shipping/internal/shipping"
	"example.com/shop/services/shipping/internal/store"
	"example.com/shop/services/shipping/migrations"
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

// TestAPI reads real rows through the real handler; every answer, success and problem
// alike, must also match api/openapi.yaml (openapitest checks status, headers and body).
func TestAPI(t *testing.T) {
	t.Parallel()
	pool, url := testkit.NewDatabase(t, migrations.Schema)
	srv := openapitest.NewServer(t, openapitest.Load(t, loadOpenAPI(t)),
		api.NewHandler(api.New(store.New(pool), nil), nil, metrics.NewRegistry()))

	placed, confirmed, cancelled := uuid.New(), uuid.New(), uuid.New()
	for _, c := range []shipping.StatusChange{
		{OrderID: placed, Status: shipping.StatusPlaced, Version: 2},
		{OrderID: confirmed, Status: shipping.StatusConfirmed, Version: 3},
		{OrderID: cancelled, Status: shipping.StatusCancelled, Version: 3},
	} {
		err := pg.WithTx(testkit.Context(t), pool, func(tx pgx.Tx) error {
			_, err := store.Apply(testkit.Context(t), tx, []shipping.StatusChange{c})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	tests := []apiCase{
		{
			name: "placed order status", path: "/order-status/" + placed.String(),
			wantStatus: 200, wantType: "application/json",
			wantBody: map[string]any{"order_id": placed.String(), "status": "placed", "version": 2.0},
		},
		{
			name: "cancelled order status", path: "/order-status/" + cancelled.String(),
			wantStatus: 200, wantType: "application/json",
			wantBody: map[string]any{"order_id": cancelled.String(), "status": "cancelled", "version": 3.0},
		},
		{
			name: "confirmed order status", path: "/order-status/" + confirmed.String(),
			wantStatus: 200, wantType: "application/json",
			wantBody: map[string]any{"order_id": confirmed.String(), "status": "confirmed", "version": 3.0},
		},
		{
			name: "pending shipment", path: "/shipments/" + placed.String(),
			wantStatus: 200, wantType: "application/json",
			wantBody:    map[string]any{"order_id": placed.String(), "status": "pending"},
			wantDynamic: []string{"id", "created_at", "updated_at"},
		},
		{
			name: "ready shipment", path: "/shipments/" + confirmed.String(),
			wantStatus: 200, wantType: "application/json",
			wantBody:    map[string]any{"order_id": confirmed.String(), "status": "ready"},
			wantDynamic: []string{"id", "created_at", "updated_at"},
		},
		{
			name: "cancelled shipment", path: "/shipments/" + cancelled.String(),
			wantStatus: 200, wantType: "application/json",
			wantBody:    map[string]any{"order_id": cancelled.String(), "status": "cancelled"},
			wantDynamic: []string{"id", "created_at", "updated_at"},
		},
		{
			name: "unknown order status", path: "/order-status/" + uuid.NewString(),
			wantStatus: 404, wantType: "application/problem+json",
			wantBody: map[string]any{"status": 404.0, "type": httpx.KindNotFound.Type()},
		},
		{
			name: "unknown shipment", path: "/shipments/" + uuid.NewString(),
			wantStatus: 404, wantType: "application/problem+json",
			wantBody: map[string]any{"status": 404.0, "type": httpx.KindNotFound.Type()},
		},
		{
			name: "bad order status id", path: "/order-status/not-a-uuid",
			wantStatus: 400, wantType: "application/problem+json",
			wantBody: map[string]any{"status": 400.0, "type": httpx.KindInvalidRequest.Type()},
		},
		{
			name: "bad shipment id", path: "/shipments/" + strings.ReplaceAll(placed.String(), "-", ""),
			wantStatus: 400, wantType: "application/problem+json",
			wantBody: map[string]any{"status": 400.0, "type": httpx.KindInvalidRequest.Type()},
		},
	}
	t.Run("answers", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) { t.Parallel(); check(t, srv, tt) })
		}
	})
	// While the database refuses connections, both routes answer 503 with Retry-After.
	testkit.RefuseConnections(t, url)
	for _, path := range []string{"/order-status/" + placed.String(), "/shipments/" + placed.String()} {
		r := srv.Do(t, http.MethodGet, path, nil, nil)
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
			t.Errorf("GET %s during an outage: %d (Retry-After %q) %s, want 503 with Retry-After",
				path, r.Status, r.Header.Get("Retry-After"), r.Body)
		}
	}
}

type apiCase struct {
	name, path  string
	wantStatus  int
	wantType    string
	wantBody    map[string]any // compared key by key
	wantDynamic []string       // keys that must be present, with values checked below
}

func check(t *testing.T, srv *openapitest.Server, tt apiCase) {
	r := srv.Do(t, http.MethodGet, tt.path, nil, nil)
	raw := r.Body
	if r.Status != tt.wantStatus {
		t.Fatalf("status = %d, want %d; body %s", r.Status, tt.wantStatus, raw)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, tt.wantType) {
		t.Errorf("Content-Type = %q, want %q", ct, tt.wantType)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("body %s: %v", raw, err)
	}
	for k, want := range tt.wantBody {
		if body[k] != want {
			t.Errorf("%s = %#v, want %#v (body %s)", k, body[k], want, raw)
		}
	}
	for _, k := range tt.wantDynamic {
		if _, ok := body[k]; !ok {
			t.Errorf("body %s has no %q", raw, k)
		}
	}
	if id, ok := body["id"].(string); ok {
		if u, err := uuid.Parse(id); err != nil || u.Version() != 7 {
			t.Errorf("id = %q, want a UUID v7", id)
		}
	}
	for _, k := range []string{"created_at", "updated_at"} {
		if s, ok := body[k].(string); ok {
			ts, err := time.Parse(time.RFC3339Nano, s)
			if err != nil || ts.Location() != time.UTC || time.Since(ts) > time.Hour {
				t.Errorf("%s = %q, want a recent RFC 3339 UTC time", k, s)
			}
		}
	}
	if tt.wantStatus == 200 {
		if len(body) != len(tt.wantBody)+len(tt.wantDynamic) {
			t.Errorf("body %s has unexpected fields", raw)
		}
	}
}
