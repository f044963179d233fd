package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/order/internal/api"
	"example.com/shop/services/order/internal/store"
	"example.com/shop/services/order/migrations"
	"example.com/shop/testkit"
)

type orderJSON struct {
	ID         string `json:"id"`
	CustomerID string `json:"customer_id"`
	Status     string `json:"status"`
	Version    int    `json:"version"`
	Lines      []struct {
		ProductID string `json:"product_id"`
		Quantity  string `json:"quantity"`
	} `json:"lines"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
}

type env struct {
	srv  *httptest.Server
	pool *pgxpool.Pool
	url  string // of the test's database ("" when built on a given pool)
	reg  *prometheus.Registry
}

func newEnv(t *testing.T, opts ...outbox.WriterOption) *env {
	t.Helper()
	pool, url := testkit.NewDatabase(t, migrations.Schema)
	e := newEnvOn(t, pool, opts...)
	e.url = url
	return e
}

func newEnvOn(t *testing.T, pool *pgxpool.Pool, opts ...outbox.WriterOption) *env {
	t.Helper()
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	return newEnvWith(t, pool, outbox.NewWriter(v, contracts.ProducerOrder, opts...))
}

// newEnvWith serves the API on pool, writing events with w.
func newEnvWith(t *testing.T, pool *pgxpool.Pool, w *outbox.Writer) *env {
	t.Helper()
	st := store.New(pool, w)
	reg := prometheus.NewRegistry()
	r := httpx.NewRouter(nil, reg)
	api.New(st, nil, reg).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &env{srv: srv, pool: pool, reg: reg}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(t *testing.T, method, path, contentType string, body []byte, header map[string]string) response {
	t.Helper()
	r, err := e.send(method, path, contentType, body, header)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// send is do for goroutines other than the test's: it reports errors instead of failing.
func (e *env) send(method, path, contentType string, body []byte, header map[string]string) (response, error) {
	req, err := http.NewRequestWithContext(context.Background(), method, e.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		return response{}, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{resp.StatusCode, resp.Header, b}, nil
}

func (e *env) post(t *testing.T, path, body string) response {
	t.Helper()
	return e.do(t, http.MethodPost, path, "application/json", []byte(body), nil)
}

func decodeOrder(t *testing.T, r response) orderJSON {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q, body %s", ct, r.body)
	}
	var o orderJSON
	if err := json.Unmarshal(r.body, &o); err != nil {
		t.Fatalf("decode order %s: %v", r.body, err)
	}
	return o
}

// checkProblem checks that r is a problem of status with a documented type and, unless
// field is "", that its errors locate field: a JSON Pointer, a header or a parameter.
func checkProblem(t *testing.T, r response, status int, field string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json; body %s", ct, r.body)
	}
	var p httpx.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("decode problem %s: %v", r.body, err)
	}
	if p.Status != status || p.Title == "" {
		t.Fatalf("problem = %+v", p)
	}
	if !strings.HasPrefix(p.Type, httpx.ProblemTypeBase) {
		t.Fatalf("problem type %q is not documented", p.Type)
	}
	if field == "" {
		return
	}
	for _, fe := range p.Errors {
		if (fe.Pointer == field || fe.Header == field || fe.Parameter == field) && fe.Detail != "" {
			return
		}
	}
	t.Fatalf("problem errors = %+v, want one at %q (%s)", p.Errors, field, p.Detail)
}

func (e *env) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func createBody(customer uuid.UUID, quantities ...string) string {
	type line struct {
		ProductID string `json:"product_id"`
		Quantity  string `json:"quantity"`
	}
	lines := make([]line, len(quantities))
	for i, q := range quantities {
		lines[i] = line{uuid.NewString(), q}
	}
	b, _ := json.Marshal(map[string]any{"customer_id": customer.String(), "lines": lines})
	return string(b)
}

func (e *env) create(t *testing.T) orderJSON {
	t.Helper()
	r := e.post(t, "/orders", createBody(uuid.New(), "2", "0.5"))
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	return decodeOrder(t, r)
}

func TestOrderLifeCycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	customer := uuid.New()
	r := e.post(t, "/orders", createBody(customer, "2", "0.5"))
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	created := decodeOrder(t, r)
	if created.Status != "draft" || created.Version != 1 || created.CustomerID != customer.String() ||
		len(created.Lines) != 2 || created.Lines[0].Quantity != "2.000" || created.Lines[1].Quantity != "0.500" ||
		!strings.HasSuffix(created.CreatedAt, "Z") || created.CreatedAt != created.UpdatedAt {
		t.Fatalf("created = %+v", created)
	}
	if loc := r.header.Get("Location"); loc != "/orders/"+created.ID {
		t.Errorf("Location = %q", loc)
	}

	r = e.do(t, http.MethodGet, "/orders/"+created.ID, "", nil, nil)
	if got := decodeOrder(t, r); r.status != http.StatusOK || got.ID != created.ID || got.Version != 1 ||
		got.CreatedAt != created.CreatedAt || !slices.Equal(got.Lines, created.Lines) {
		t.Fatalf("get = %d %+v, want %+v", r.status, got, created)
	}

	r = e.post(t, "/orders/"+created.ID+"/place", "")
	if got := decodeOrder(t, r); r.status != http.StatusOK || got.Status != "placed" || got.Version != 2 {
		t.Fatalf("place = %d %+v", r.status, got)
	}
	checkProblem(t, e.post(t, "/orders/"+created.ID+"/place", ""), http.StatusConflict, "")

	r = e.post(t, "/orders/"+created.ID+"/cancel", "")
	if got := decodeOrder(t, r); r.status != http.StatusOK || got.Status != "cancelled" || got.Version != 3 {
		t.Fatalf("cancel = %d %+v", r.status, got)
	}
	checkProblem(t, e.post(t, "/orders/"+created.ID+"/cancel", ""), http.StatusConflict, "")

	rows, err := e.pool.Query(context.Background(), `SELECT event_name, envelope->'payload'->>'version' FROM outbox ORDER BY occurred_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for rows.Next() {
		var name, version string
		if err := rows.Scan(&name, &version); err != nil {
			t.Fatal(err)
		}
		events = append(events, name+"@"+version)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{contracts.EventOrderPlaced + "@2", contracts.EventOrderCancelled + "@3"}
	if !slices.Equal(events, want) {
		t.Fatalf("outbox = %v, want %v", events, want)
	}

	unknown := uuid.NewString()
	checkProblem(t, e.do(t, http.MethodGet, "/orders/"+unknown, "", nil, nil), http.StatusNotFound, "")
	checkProblem(t, e.post(t, "/orders/"+unknown+"/place", ""), http.StatusNotFound, "")
	checkProblem(t, e.post(t, "/orders/"+unknown+"/cancel", ""), http.StatusNotFound, "")
}

// Two concurrent places on one draft, 20 times: exactly one 200 and one 409 each time,
// one outbox row, and the version goes from 1 to 2 once (docs/architecture.md, rule 1).
func TestConcurrentPlace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const runs = 20
	for run := range runs {
		o := e.create(t)
		var (
			wg        sync.WaitGroup
			start     = make(chan struct{})
			responses [2]response
			errs      [2]error
		)
		for i := range 2 {
			wg.Go(func() {
				<-start
				responses[i], errs[i] = e.send(http.MethodPost, "/orders/"+o.ID+"/place", "application/json", nil, nil)
			})
		}
		close(start)
		wg.Wait()
		var statuses []int
		version := 0
		for i, r := range responses {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			statuses = append(statuses, r.status)
			if r.status == http.StatusOK {
				version += decodeOrder(t, r).Version
			} else {
				checkProblem(t, r, http.StatusConflict, "")
			}
		}
		slices.Sort(statuses)
		if !slices.Equal(statuses, []int{http.StatusOK, http.StatusConflict}) {
			t.Fatalf("run %d: statuses = %v, want one 200 and one 409", run, statuses)
		}
		if version != 2 {
			t.Fatalf("run %d: the winner's version = %d, want 2", run, version)
		}
		var rows, stored int
		if err := e.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM outbox WHERE envelope->'payload'->>'order_id' = $1`, o.ID).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if err := e.pool.QueryRow(context.Background(), `SELECT version FROM orders WHERE id = $1`, o.ID).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if rows != 1 || stored != 2 {
			t.Fatalf("run %d: outbox rows = %d, version = %d; want 1 and 2", run, rows, stored)
		}
	}
	if n := e.count(t, "outbox"); n != runs {
		t.Fatalf("outbox rows = %d, want %d", n, runs)
	}
}

// A forced schema failure (a Writer with an empty producer, which the
// envelope schema refuses) answers 500, leaves the order a draft at version
// 1, and writes no outbox row: the envelope check rolls the whole
// transaction back.
func TestSchemaFailureLeavesDraft(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, pool, outbox.NewWriter(v, ""))
	o := e.create(t)
	checkProblem(t, e.post(t, "/orders/"+o.ID+"/place", ""), http.StatusInternalServerError, "")
	got := decodeOrder(t, e.do(t, http.MethodGet, "/orders/"+o.ID, "", nil, nil))
	if got.Status != "draft" || got.Version != 1 {
		t.Fatalf("after schema failure: %s v%d, want draft v1", got.Status, got.Version)
	}
	if n := e.count(t, "outbox"); n != 0 {
		t.Fatalf("outbox rows = %d, want 0", n)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	customer := uuid.NewString()
	product := uuid.NewString()
	line := func(q string) string { return `{"product_id":"` + product + `","quantity":"` + q + `"}` }
	body := func(lines ...string) string {
		return `{"customer_id":"` + customer + `","lines":[` + strings.Join(lines, ",") + `]}`
	}
	cases := []struct {
		name        string
		method      string
		path        string
		contentType string
		body        string
		header      map[string]string
		status      int
		field       string
	}{
		{name: "malformed JSON", body: `{"customer_id":`, status: 400},
		{name: "syntax error", body: `{"customer_id" "x"}`, status: 400},
		{name: "empty body", body: ``, status: 400},
		{name: "not an object", body: `[1,2]`, status: 400},
		{name: "trailing data", body: body(line("1")) + `{}`, status: 400},
		{name: "unknown field", body: `{"customer_id":"` + customer + `","lines":[` + line("1") + `],"discount":5}`, status: 400, field: "/discount"},
		{name: "unknown line field", body: body(`{"product_id":"` + product + `","quantity":"1","price":"3"}`), status: 400, field: "/lines/0/price"},
		{name: "quantity as number", body: body(`{"product_id":"` + product + `","quantity":2}`), status: 400, field: "/lines/0/quantity"},
		{name: "customer_id as number", body: `{"customer_id":7,"lines":[` + line("1") + `]}`, status: 400, field: "/customer_id"},
		{name: "field name in another case", body: `{"Customer_ID":"` + customer + `","lines":[` + line("1") + `]}`, status: 400, field: "/Customer_ID"},
		{name: "duplicate key", body: `{"customer_id":"` + customer + `","customer_id":"` + customer + `","lines":[` + line("1") + `]}`, status: 400, field: "/customer_id"},
		{name: "duplicate key in a line", body: body(`{"product_id":"` + product + `","quantity":"1","quantity":"2"}`), status: 400, field: "/lines/0/quantity"},
		{name: "product_id as number on the second line", body: body(line("1"), `{"product_id":7,"quantity":"1"}`), status: 400, field: "/lines/1/product_id"},
		{name: "unknown field on the second line", body: body(line("1"), `{"product_id":"`+uuid.NewString()+`","quantity":"1","sku":"x"}`), status: 400, field: "/lines/1/sku"},
		{name: "lines as object", body: `{"customer_id":"` + customer + `","lines":{}}`, status: 400, field: "/lines"},
		{name: "wrong content type", contentType: "text/plain", body: body(line("1")), status: 415},
		{name: "body too large", body: `{"lines":[` + line("1") + `],"customer_id":"` + strings.Repeat("a", httpx.MaxBodyBytes) + `"}`, status: 413},
		{name: "missing customer_id", body: `{"lines":[` + line("1") + `]}`, status: 422, field: "/customer_id"},
		{name: "bad customer_id", body: `{"customer_id":"nope","lines":[` + line("1") + `]}`, status: 422, field: "/customer_id"},
		{name: "customer_id braces", body: `{"customer_id":"{` + customer + `}","lines":[` + line("1") + `]}`, status: 422, field: "/customer_id"},
		{name: "nil customer_id", body: `{"customer_id":"00000000-0000-0000-0000-000000000000","lines":[` + line("1") + `]}`, status: 422, field: "/customer_id"},
		{name: "missing lines", body: `{"customer_id":"` + customer + `"}`, status: 422, field: "/lines"},
		{name: "null lines", body: `{"customer_id":"` + customer + `","lines":null}`, status: 400, field: "/lines"},
		{name: "null body", body: `null`, status: 400, field: ""},
		{name: "null customer_id", body: `{"customer_id":null,"lines":[` + line("1") + `]}`, status: 400, field: "/customer_id"},
		{name: "null line", body: body(line("1"), `null`), status: 400, field: "/lines/1"},
		{name: "null quantity", body: body(`{"product_id":"` + product + `","quantity":null}`), status: 400, field: "/lines/0/quantity"},
		{name: "empty lines", body: body(), status: 422, field: "/lines"},
		{name: "bad product_id", body: body(line("1"), `{"product_id":"123","quantity":"1"}`), status: 422, field: "/lines/1/product_id"},
		{name: "missing product_id", body: body(`{"quantity":"1"}`), status: 422, field: "/lines/0/product_id"},
		{name: "duplicate product", body: body(line("1"), line("2")), status: 422, field: "/lines/1/product_id"},
		{name: "missing quantity", body: body(`{"product_id":"` + product + `"}`), status: 422, field: "/lines/0/quantity"},
		{name: "zero quantity", body: body(line("0")), status: 422, field: "/lines/0/quantity"},
		{name: "zero quantity with decimals", body: body(line("0.000")), status: 422, field: "/lines/0/quantity"},
		{name: "negative quantity", body: body(line("-1")), status: 422, field: "/lines/0/quantity"},
		{name: "four decimals", body: body(line("1.0001")), status: 422, field: "/lines/0/quantity"},
		{name: "exponent", body: body(line("1e3")), status: 422, field: "/lines/0/quantity"},
		{name: "ten integer digits", body: body(line("1000000000")), status: 422, field: "/lines/0/quantity"},
		{name: "not a number", body: body(line("two")), status: 422, field: "/lines/0/quantity"},
		{name: "empty quantity", body: body(line("")), status: 422, field: "/lines/0/quantity"},
		{name: "bad idempotency key", body: body(line("1")), header: map[string]string{"Idempotency-Key": "has space"}, status: 400, field: "Idempotency-Key"},
		{name: "get bad id", method: http.MethodGet, path: "/orders/nope", status: 400, field: "id"},
		{name: "place bad id", path: "/orders/12345/place", status: 400, field: "id"},
		{name: "cancel bad id", path: "/orders/" + strings.ToUpper(customer) + "x/cancel", status: 400, field: "id"},
		{name: "place with a member", path: "/orders/" + uuid.NewString() + "/place", body: `{"x":1}`, status: 400, field: "/x"},
		{name: "cancel with an array", path: "/orders/" + uuid.NewString() + "/cancel", body: `[]`, status: 400, field: ""},
		{name: "place with another charset", path: "/orders/" + uuid.NewString() + "/place", contentType: "application/json; charset=latin1", body: `{}`, status: 415, field: "Content-Type"},
		{name: "create with another charset", contentType: "application/json; charset=latin1", body: body(line("1")), status: 415, field: "Content-Type"},
		{name: "place unknown order with {}", path: "/orders/" + uuid.NewString() + "/place", body: `{}`, status: 404},
		{name: "place unknown order", path: "/orders/" + uuid.NewString() + "/place", status: 404},
		{name: "cancel unknown order", path: "/orders/" + uuid.NewString() + "/cancel", status: 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			method, path, ct := tc.method, tc.path, tc.contentType
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/orders"
			}
			if ct == "" && method == http.MethodPost {
				ct = "application/json"
			}
			checkProblem(t, e.do(t, method, path, ct, []byte(tc.body), tc.header), tc.status, tc.field)
		})
	}
	for _, table := range []string{"orders", "order_line", "outbox", "processed_event"} {
		if n := e.count(t, table); n != 0 {
			t.Errorf("%s rows = %d after bad input, want 0", table, n)
		}
	}
	// The limits themselves are accepted.
	r := e.post(t, "/orders", body(line("999999999.999")))
	if got := decodeOrder(t, r); r.status != http.StatusCreated || got.Lines[0].Quantity != "999999999.999" {
		t.Fatalf("largest quantity: %d %s", r.status, r.body)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := createBody(uuid.New(), "3")
	key := map[string]string{"Idempotency-Key": "a1b2c3-" + uuid.NewString()}

	first := e.do(t, http.MethodPost, "/orders", "application/json", []byte(body), key)
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v %s", first.status, first.header, first.body)
	}
	again := e.do(t, http.MethodPost, "/orders", "application/json", []byte(body), key)
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %v %s", again.status, again.header, again.body)
	}
	if a, b := decodeOrder(t, first), decodeOrder(t, again); a.ID != b.ID || a.Version != b.Version || a.CreatedAt != b.CreatedAt {
		t.Fatalf("retry returned %+v, want %+v", b, a)
	}
	// A semantically equal body ("3" and "3.000") is the same request.
	same := strings.Replace(body, `"3"`, `"3.000"`, 1)
	if r := e.do(t, http.MethodPost, "/orders", "application/json", []byte(same), key); r.status != http.StatusCreated ||
		decodeOrder(t, r).ID != decodeOrder(t, first).ID {
		t.Fatalf("normalised retry: %d %s", r.status, r.body)
	}
	checkProblem(t, e.do(t, http.MethodPost, "/orders", "application/json", []byte(createBody(uuid.New(), "3")), key),
		http.StatusUnprocessableEntity, "Idempotency-Key")
	if n := e.count(t, "orders"); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}

	// Concurrent creates with one fresh key make one order.
	key2 := map[string]string{"Idempotency-Key": uuid.NewString()}
	body2 := createBody(uuid.New(), "1", "2")
	ids := make([]string, 8)
	responses := make([]response, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			responses[i], errs[i] = e.send(http.MethodPost, "/orders", "application/json", []byte(body2), key2)
		})
	}
	wg.Wait()
	for i, r := range responses {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if r.status != http.StatusCreated {
			t.Fatalf("concurrent create: %d %s", r.status, r.body)
		}
		ids[i] = decodeOrder(t, r).ID
	}
	if distinct := slices.Compact(slices.Sorted(slices.Values(ids))); len(distinct) != 1 {
		t.Fatalf("concurrent creates returned orders %v, want one", distinct)
	}
	if n := e.count(t, "orders"); n != 2 {
		t.Fatalf("orders = %d, want 2", n)
	}
}

func TestIdempotencyKeyGivenTwiceIsRejected(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, e.srv.URL+"/orders",
		strings.NewReader(createBody(uuid.New(), "1")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Add("Idempotency-Key", "first")
	req.Header.Add("Idempotency-Key", "second")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	checkProblem(t, response{resp.StatusCode, resp.Header, b}, http.StatusBadRequest, "Idempotency-Key")
	if n := e.count(t, "orders"); n != 0 {
		t.Errorf("orders rows = %d, want 0", n)
	}
}

// While the database refuses connections every route answers 503 with
// Retry-After, never 500; once it is back the same requests succeed.
func TestDatabaseOutageAnswers503WithRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.create(t)
	restore := testkit.RefuseConnections(t, e.url)

	requests := []struct{ method, path, body string }{
		{http.MethodPost, "/orders", createBody(uuid.New(), "1")},
		{http.MethodGet, "/orders/" + o.ID, ""},
		{http.MethodPost, "/orders/" + o.ID + "/place", ""},
		{http.MethodPost, "/orders/" + o.ID + "/cancel", ""},
	}
	// Twice: first on the pool's terminated sessions, then on refused
	// connections.
	for range 2 {
		for _, rq := range requests {
			r := e.do(t, rq.method, rq.path, "application/json", []byte(rq.body), nil)
			checkProblem(t, r, http.StatusServiceUnavailable, "")
			if ra := r.header.Get("Retry-After"); ra != "5" {
				t.Fatalf("%s %s: Retry-After %q, want 5", rq.method, rq.path, ra)
			}
		}
	}

	restore()
	if r := e.post(t, "/orders/"+o.ID+"/place", ""); r.status != http.StatusOK {
		t.Fatalf("place after the outage: %d %s", r.status, r.body)
	}
	if r := e.post(t, "/orders", createBody(uuid.New(), "1")); r.status != http.StatusCreated {
		t.Fatalf("create after the outage: %d %s", r.status, r.body)
	}
}

// A request whose database work does not finish within api.DatabaseTimeout
// (here: the order's row stays locked by another session) answers 503 with
// Retry-After instead of waiting for ever.
func TestDatabaseThatDoesNotAnswerInTimeAnswers503(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.create(t)
	tx, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM orders WHERE id = $1 FOR UPDATE`, o.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := e.post(t, "/orders/"+o.ID+"/place", "")
	checkProblem(t, r, http.StatusServiceUnavailable, "")
	if ra := r.header.Get("Retry-After"); ra != "5" {
		t.Fatalf("Retry-After %q, want 5", ra)
	}
	if took := time.Since(start); took < api.DatabaseTimeout {
		t.Fatalf("answered after %v, before the %v budget ran out", took, api.DatabaseTimeout)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := e.post(t, "/orders/"+o.ID+"/place", ""); r.status != http.StatusOK {
		t.Fatalf("place once the lock is gone: %d %s", r.status, r.body)
	}
}

// A place retried with its Idempotency-Key gets its first 200 again, byte for
// byte, even after the order was cancelled; the same key on another route or
// another order is a conflict (422), counted per consumer.
func TestIdempotentPlaceAndCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.create(t)
	placeKey := map[string]string{"Idempotency-Key": "place-" + uuid.NewString()}
	place := func(id string, key map[string]string) response {
		return e.do(t, http.MethodPost, "/orders/"+id+"/place", "", nil, key)
	}
	first := place(o.ID, placeKey)
	if first.status != http.StatusOK || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("place: %d %v %s", first.status, first.header, first.body)
	}
	cancelKey := map[string]string{"Idempotency-Key": "cancel-" + uuid.NewString()}
	cancelled := e.do(t, http.MethodPost, "/orders/"+o.ID+"/cancel", "", nil, cancelKey)
	if cancelled.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", cancelled.status, cancelled.body)
	}
	// The client timed out on its place and retries it: the first answer, not a 409.
	retry := place(strings.ToUpper(o.ID), placeKey)
	if retry.status != http.StatusOK || retry.header.Get("Idempotent-Replayed") != "true" ||
		!bytes.Equal(retry.body, first.body) || retry.header.Get("Content-Type") != "application/json" {
		t.Fatalf("retried place: %d %v %s; want the first 200 %s", retry.status, retry.header, retry.body, first.body)
	}
	if got := decodeOrder(t, retry); got.Status != "placed" || got.Version != 2 {
		t.Errorf("replayed order = %+v, want the placed version 2", got)
	}
	again := e.do(t, http.MethodPost, "/orders/"+o.ID+"/cancel", "", nil, cancelKey)
	if again.status != http.StatusOK || again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, cancelled.body) {
		t.Fatalf("retried cancel: %d %s", again.status, again.body)
	}
	// The place key on the cancel route, or on another order: 422.
	checkProblem(t, e.do(t, http.MethodPost, "/orders/"+o.ID+"/cancel", "", nil, placeKey), http.StatusUnprocessableEntity, "Idempotency-Key")
	other := e.create(t)
	checkProblem(t, place(other.ID, placeKey), http.StatusUnprocessableEntity, "Idempotency-Key")
	checkProblem(t, e.do(t, http.MethodPost, "/orders", "application/json", []byte(createBody(uuid.New(), "1")), placeKey),
		http.StatusUnprocessableEntity, "Idempotency-Key")
	if got := decodeOrder(t, e.do(t, http.MethodGet, "/orders/"+other.ID, "", nil, nil)); got.Status != "draft" {
		t.Errorf("the other order is %s, want draft (the conflicting place must not apply)", got.Status)
	}
	if got := counter(t, e.reg, "inbox_conflicts_total"); got != 3 {
		t.Errorf("inbox_conflicts_total{consumer=order-api} = %v, want 3", got)
	}
	if got := counter(t, e.reg, "inbox_duplicates_total"); got != 2 {
		t.Errorf("inbox_duplicates_total{consumer=order-api} = %v, want 2", got)
	}

	// A place that fails (409: not a draft) stores nothing: its retry runs again.
	failKey := map[string]string{"Idempotency-Key": "fail-" + uuid.NewString()}
	for range 2 {
		if r := place(o.ID, failKey); r.status != http.StatusConflict || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("place of a cancelled order: %d %v", r.status, r.header)
		}
	}

	// Concurrent places of one draft with one key: all get the same 200.
	d := e.create(t)
	key := map[string]string{"Idempotency-Key": uuid.NewString()}
	bodies := make([]string, 6)
	errs := make([]error, len(bodies))
	var wg sync.WaitGroup
	for i := range bodies {
		wg.Go(func() {
			r, err := e.send(http.MethodPost, "/orders/"+d.ID+"/place", "", nil, key)
			if err == nil && r.status != http.StatusOK {
				err = fmt.Errorf("status %d: %s", r.status, r.body)
			}
			bodies[i], errs[i] = string(r.body), err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent place with one key: %v", err)
		}
	}
	if distinct := slices.Compact(slices.Sorted(slices.Values(bodies))); len(distinct) != 1 {
		t.Fatalf("concurrent places answered %d different bodies, want 1", len(distinct))
	}
}

// counter returns the value of name{consumer="order-api"} in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() == api.IdempotencyConsumer {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{consumer=%q}", name, api.IdempotencyConsumer)
	return 0
}

// Every value at fault is reported at once, each at its JSON Pointer.
func TestValidationLocatesEveryValue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := `{"customer_id":"nope","lines":[{"product_id":"` + uuid.NewString() + `","quantity":"1"},{"product_id":"x","quantity":"0"}]}`
	r := e.post(t, "/orders", body)
	checkProblem(t, r, http.StatusUnprocessableEntity, "/customer_id")
	var p httpx.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, fe := range p.Errors {
		got = append(got, fe.Pointer)
	}
	if want := []string{"/customer_id", "/lines/1/product_id", "/lines/1/quantity"}; !slices.Equal(got, want) {
		t.Fatalf("pointers = %v, want %v (%s)", got, want, r.body)
	}
	if p.Type != httpx.KindValidation.Type() {
		t.Errorf("type = %q, want %q", p.Type, httpx.KindValidation.Type())
	}
}
