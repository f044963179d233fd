package httpx_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/httpx"
	"example.com/shop/platform/metrics"
	"example.com/shop/testkit"
)

func newTestRouter(t *testing.T, checks ...httpx.Check) (*chi.Mux, *prometheus.Registry, *testkit.Logs) {
	t.Helper()
	logger, logs := testkit.Logger(t)
	reg := metrics.NewRegistry()
	return httpx.NewRouter(logger, reg, checks...), reg, logs
}

func do(t *testing.T, h http.Handler, method, target string, body io.Reader, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, body)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func decodeProblem(t *testing.T, rec *httptest.ResponseRecorder) httpx.Problem {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != httpx.ContentTypeProblem {
		t.Fatalf("Content-Type = %q, want %q (body %s)", ct, httpx.ContentTypeProblem, rec.Body)
	}
	var p httpx.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body, err)
	}
	if p.Status != rec.Code {
		t.Errorf("problem status %d, response status %d", p.Status, rec.Code)
	}
	if !strings.HasPrefix(p.Type, httpx.ProblemTypeBase) || p.Title == "" {
		t.Errorf("problem lacks a documented type or a title: %+v", p)
	}
	return p
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	r, _, _ := newTestRouter(t)
	rec := do(t, r, http.MethodGet, "/healthz", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d", rec.Code)
	}
	if got := strings.TrimSpace(rec.Body.String()); got != `{"status":"ok"}` {
		t.Errorf("body = %s", got)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if rec.Header().Get("X-Request-Id") == "" {
		t.Error("X-Request-Id not echoed")
	}
}

func TestRequestIDEchoesIncoming(t *testing.T) {
	t.Parallel()
	r, _, logs := newTestRouter(t)
	rec := do(t, r, http.MethodGet, "/healthz", nil, "X-Request-Id", "req-42")
	if got := rec.Header().Get("X-Request-Id"); got != "req-42" {
		t.Errorf("X-Request-Id = %q, want req-42", got)
	}
	if !strings.Contains(logs.String(), `"request_id":"req-42"`) {
		t.Errorf("request log lacks the request id: %s", logs)
	}
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	ok := httpx.Check{Name: "postgres", Fn: func(context.Context) error { return nil }}
	broken := httpx.Check{Name: "rabbitmq", Fn: func(context.Context) error {
		return errors.New("dial tcp 10.0.0.7:5672: connection refused")
	}}

	t.Run("ready", func(t *testing.T) {
		t.Parallel()
		r, _, _ := newTestRouter(t, ok)
		rec := do(t, r, http.MethodGet, "/readyz", nil)
		if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"status":"ready"}` {
			t.Errorf("got %d %s", rec.Code, rec.Body)
		}
	})
	t.Run("no checks", func(t *testing.T) {
		t.Parallel()
		r, _, _ := newTestRouter(t)
		if rec := do(t, r, http.MethodGet, "/readyz", nil); rec.Code != http.StatusOK {
			t.Errorf("status = %d", rec.Code)
		}
	})
	t.Run("failing check", func(t *testing.T) {
		t.Parallel()
		r, _, logs := newTestRouter(t, ok, broken)
		rec := do(t, r, http.MethodGet, "/readyz", nil)
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("status = %d", rec.Code)
		}
		p := decodeProblem(t, rec)
		if !strings.Contains(p.Detail, `"rabbitmq"`) || strings.Contains(p.Detail, "postgres") {
			t.Errorf("detail = %q, want it to name rabbitmq only", p.Detail)
		}
		if strings.Contains(rec.Body.String(), "10.0.0.7") {
			t.Errorf("problem leaks the check error: %s", rec.Body)
		}
		if !strings.Contains(logs.String(), "connection refused") {
			t.Errorf("check error not logged: %s", logs)
		}
	})
	t.Run("check ignoring its context times out", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		stuck := httpx.Check{Name: "stuck", Fn: func(context.Context) error { <-release; return nil }}
		r, _, _ := newTestRouter(t, stuck)
		rec := do(t, r, http.MethodGet, "/readyz", nil)
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("status = %d", rec.Code)
		}
		if p := decodeProblem(t, rec); !strings.Contains(p.Detail, `"stuck"`) {
			t.Errorf("detail = %q", p.Detail)
		}
	})
	t.Run("panicking check", func(t *testing.T) {
		t.Parallel()
		boom := httpx.Check{Name: "boom", Fn: func(context.Context) error { panic("nil map") }}
		r, _, _ := newTestRouter(t, boom)
		if rec := do(t, r, http.MethodGet, "/readyz", nil); rec.Code != http.StatusServiceUnavailable {
			t.Errorf("status = %d", rec.Code)
		}
	})
}

func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	t.Parallel()
	r, _, _ := newTestRouter(t)
	r.Post("/items", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })

	rec := do(t, r, http.MethodGet, "/nowhere", nil)
	if rec.Code != http.StatusNotFound {
		t.Fatalf("status = %d", rec.Code)
	}
	if p := decodeProblem(t, rec); p.Instance != "/nowhere" {
		t.Errorf("instance = %q", p.Instance)
	}

	rec = do(t, r, http.MethodDelete, "/items", nil)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("status = %d", rec.Code)
	}
	decodeProblem(t, rec)
	if allow := rec.Header().Get("Allow"); allow != "POST" {
		t.Errorf("Allow = %q, want POST", allow)
	}

	// HEAD is answered where GET is, without a body, and listed beside it.
	r.Get("/things", func(w http.ResponseWriter, _ *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	resp, err := srv.Client().Head(srv.URL + "/things")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(b) != 0 || resp.Header.Get("Content-Type") != httpx.ContentTypeJSON {
		t.Errorf("HEAD /things = %d, %q, %d bytes; want 200 with GET's headers and no body", resp.StatusCode, resp.Header.Get("Content-Type"), len(b))
	}
	if rec := do(t, r, http.MethodHead, "/items", nil); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("HEAD /items (POST only) = %d, want 405", rec.Code)
	}
	if rec := do(t, r, http.MethodPut, "/things", nil); rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("Allow = %q, want GET, HEAD", rec.Header().Get("Allow"))
	}
}

func TestRecovererAnswersProblem(t *testing.T) {
	t.Parallel()
	r, reg, logs := newTestRouter(t)
	r.Get("/boom", func(http.ResponseWriter, *http.Request) {
		panic("secret table users_internal is corrupt")
	})
	rec := do(t, r, http.MethodGet, "/boom", nil)
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status = %d", rec.Code)
	}
	decodeProblem(t, rec)
	if strings.Contains(rec.Body.String(), "users_internal") {
		t.Errorf("500 body leaks the panic: %s", rec.Body)
	}
	if !strings.Contains(logs.String(), "users_internal") || !strings.Contains(logs.String(), "http handler panic") {
		t.Errorf("panic not logged: %s", logs)
	}
	if !strings.Contains(scrape(t, reg), `http_requests_total{method="GET",route="/boom",status="500"} 1`) {
		t.Error("panic not counted as a 500")
	}
}

func TestRecovererAbortsStartedResponse(t *testing.T) {
	t.Parallel()
	r, _, _ := newTestRouter(t)
	r.Get("/half", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"items":[`))
		w.(http.Flusher).Flush()
		panic("lost the cursor")
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	resp, err := srv.Client().Get(srv.URL + "/half")
	if err != nil {
		return // aborted before the headers arrived: also acceptable
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("reading a response whose handler panicked mid-body succeeded; want an aborted connection")
	}
}

func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	r := httpx.NewRouter(nil, reg)
	rec := do(t, r, http.MethodGet, "/metrics", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics status = %d", rec.Code)
	}
	return rec.Body.String()
}

func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	r, _, _ := newTestRouter(t)
	r.Get("/items/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })

	do(t, r, http.MethodGet, "/items/1", nil)
	do(t, r, http.MethodGet, "/items/2", nil)
	do(t, r, http.MethodGet, "/random/path/123", nil)
	do(t, r, "BREW", "/items/1", nil)

	rec := do(t, r, http.MethodGet, "/metrics", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d", rec.Code)
	}
	body := rec.Body.String()
	for _, want := range []string{
		`http_requests_total{method="GET",route="/items/{id}",status="204"} 2`,
		`http_requests_total{method="GET",route="unmatched",status="404"} 1`,
		`http_request_duration_seconds_count{method="GET",route="/items/{id}",status="204"} 2`,
		`http_requests_total{method="OTHER",`,
		"go_goroutines",
		"process_",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "/random/path") || strings.Contains(body, "BREW") {
		t.Error("raw path or method became a label")
	}
}

func TestTwoRoutersShareOneRegistry(t *testing.T) {
	t.Parallel()
	reg := metrics.NewRegistry()
	a := httpx.NewRouter(nil, reg)
	b := httpx.NewRouter(nil, reg)
	do(t, a, http.MethodGet, "/healthz", nil)
	do(t, b, http.MethodGet, "/healthz", nil)
	if !strings.Contains(scrape(t, reg), `http_requests_total{method="GET",route="/healthz",status="200"} 2`) {
		t.Error("requests of both routers not counted together")
	}
}
