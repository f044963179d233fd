package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/httpx"
	apidoc "example.com/shop/services/auditor/api"
	"example.com/shop/services/auditor/internal/api"
	"example.com/shop/services/auditor/internal/auditor"
	"example.com/shop/services/auditor/internal/probe"
	"example.com/shop/services/auditor/internal/store/storetest"
	"example.com/shop/testkit/openapitest"
)

// TestResponsesMatchOpenAPI: every answer of the real auditor on real databases (an
// order placed then cancelled, its events published, processed by one consumer and
// dead-lettered by the other), success and problem alike, matches api/openapi.yaml:
// status, content type and body schema, instants in UTC with milliseconds included;
// and every documented operation is called.
func TestResponsesMatchOpenAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, st, sh := storetest.New(t)
	exec := func(p *pgxpool.Pool, sql string, args ...any) {
		t.Helper()
		if _, err := p.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Instants with microseconds, as PostgreSQL stores them: the API must cut them.
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond).Add(123 * time.Microsecond)
	order := uuid.Must(uuid.NewV7())
	exec(o.Pool, `INSERT INTO orders (id, customer_id, status, version, created_at, updated_at)
VALUES ($1, $2, 'cancelled', 3, $3, $4)`, order, uuid.New(), t0, t0.Add(2*time.Second))
	var events []uuid.UUID
	for i, name := range []string{contracts.EventOrderPlaced, contracts.EventOrderCancelled} {
		id := uuid.Must(uuid.NewV7())
		events = append(events, id)
		at := t0.Add(time.Duration(i+1) * time.Second)
		env := fmt.Sprintf(`{"event_id":%q,"event_name":%q,"payload":{"order_id":%q,"version":%d}}`, id, name, order, i+2)
		exec(o.Pool, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
VALUES ($1, $2, $2, $3, $4, $5)`, id, name, env, at, at.Add(10*time.Millisecond+7*time.Microsecond))
		exec(sh.Pool, `INSERT INTO processed_event (consumer, message_key, processed_at) VALUES ($1, $2, $3)`,
			contracts.ConsumerShipping, id.String(), at.Add(30*time.Millisecond+11*time.Microsecond))
	}
	exec(st.Pool, `INSERT INTO processed_event (consumer, message_key, processed_at) VALUES ($1, $2, $3)`,
		contracts.ConsumerStock, events[0].String(), t0.Add(time.Second+20*time.Millisecond))
	exec(st.Pool, `INSERT INTO dead_letter (consumer, message_key, event_id, event_name, reason, attempts, dead_lettered_at)
VALUES ($1, $2, $3, $4, 'handler failed', 5, $5)`, contracts.ConsumerStock, events[1].String(), events[1],
		contracts.EventOrderCancelled, t0.Add(3*time.Second+5*time.Microsecond))
	// A second order, left placed: stock's answer waits in stock's outbox, and order has
	// not applied it (the answer leg, and an unanswered order).
	waiting := idAt(t0)
	exec(o.Pool, `INSERT INTO orders (id, customer_id, status, version, created_at, updated_at)
VALUES ($1, $2, 'placed', 2, $3, $3)`, waiting, uuid.New(), t0)
	placedEv, answer := idAt(t0.Add(time.Second)), idAt(t0.Add(2*time.Second))
	exec(o.Pool, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
VALUES ($1, $2, $2, $3, $4, $4)`, placedEv, contracts.EventOrderPlaced,
		fmt.Sprintf(`{"payload":{"order_id":%q,"version":2}}`, waiting), t0.Add(time.Second))
	exec(st.Pool, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
VALUES ($1, $2, $2, $3, $4, $4)`, answer, contracts.EventStockReservationConfirmed,
		fmt.Sprintf(`{"payload":{"order_id":%q,"order_version":2}}`, waiting), t0.Add(2*time.Second))
	// A third order rejected although stock's outbox says confirmed (a contradiction),
	// and a dead letter at stock of a message in no outbox.
	rejected := idAt(t0)
	exec(o.Pool, `INSERT INTO orders (id, customer_id, status, version, created_at, updated_at, rejection)
VALUES ($1, $2, 'rejected', 3, $3, $3, '{"reason":"insufficient_stock","lines":[]}')`, rejected, uuid.New(), t0)
	exec(st.Pool, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
VALUES ($1, $2, $2, $3, $4, $4)`, idAt(t0.Add(3*time.Second)), contracts.EventStockReservationConfirmed,
		fmt.Sprintf(`{"payload":{"order_id":%q,"order_version":2}}`, rejected), t0.Add(3*time.Second))
	exec(st.Pool, `INSERT INTO dead_letter (consumer, message_key, reason, attempts, dead_lettered_at)
VALUES ($1, 'sha256:00ff', 'undecodable', 1, $2)`, contracts.ConsumerStock, t0.Add(4*time.Second+5*time.Microsecond))
	exec(st.Pool, `INSERT INTO order_status (order_id, status, version) VALUES ($1, 'placed', 2)`, order)
	exec(sh.Pool, `INSERT INTO order_status (order_id, status, version) VALUES ($1, 'cancelled', 3)`, order)
	exec(sh.Pool, `INSERT INTO shipment (id, order_id, status) VALUES ($1, $2, 'cancelled')`, uuid.New(), order)

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := storetest.Store(o, st, sh)
	reg := prometheus.NewRegistry()
	audit, err := auditor.New(s, auditor.Config{Interval: time.Second, Grace: time.Minute, Window: time.Hour}, reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	if r := audit.Report(); r.Unanswered != 1 || r.UnansweredOrders[0].Answer == nil || r.Contradictions != 1 ||
		r.DeadLetteredUnknown[contracts.ConsumerStock] != 1 {
		t.Fatalf("report %+v, want the order left placed with stock's answer, a contradiction, an unknown dead letter", r)
	}
	// Nothing listens on port 1: the counters scraped from the services are notes.
	pr := probe.New(map[string]string{contracts.ConsumerStock: "http://127.0.0.1:1/metrics",
		contracts.ConsumerShipping: "http://127.0.0.1:1/metrics"}, "amqp://guest:guest@127.0.0.1:1/", nil)
	t.Cleanup(func() { _ = pr.Close() })
	r := httpx.NewRouter(logger, reg)
	api.New(audit, auditor.NewJourneys(s, time.Minute), s, pr, api.RegistryTopology(), apidoc.OpenAPI, logger).Routes(r)
	srv := openapitest.NewServer(t, openapitest.Load(t, apidoc.OpenAPI), r)

	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/orders/" + order.String() + "/journey", http.StatusOK},
		{"/orders/" + uuid.NewString() + "/journey", http.StatusNotFound},
		{"/orders/not-a-uuid/journey", http.StatusBadRequest},
		{"/events/" + events[1].String() + "/journey", http.StatusOK},
		{"/orders/" + waiting.String() + "/journey", http.StatusOK},
		{"/events/" + answer.String() + "/journey", http.StatusOK},
		{"/events/" + uuid.NewString() + "/journey", http.StatusNotFound},
		{"/events/x/journey", http.StatusBadRequest},
		{"/audit", http.StatusOK},
		{"/board", http.StatusOK},
		{"/openapi.yaml", http.StatusOK},
		{"/", http.StatusOK},
		{"/static/page.js", http.StatusOK},
		{"/static/none.css", http.StatusNotFound},
	} {
		if got := srv.Do(t, http.MethodGet, tc.path, nil, nil); got.Status != tc.status {
			t.Errorf("GET %s: %d, want %d: %s", tc.path, got.Status, tc.status, got.Body)
		}
	}
}

// idAt returns a UUID v7 of the millisecond of at, as the services make them then.
func idAt(at time.Time) uuid.UUID {
	u := uuid.Must(uuid.NewV7())
	ms := at.UnixMilli()
	for i := 5; i >= 0; i-- {
		u[i] = byte(ms)
		ms >>= 8
	}
	return u
}
