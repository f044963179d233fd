package httpx_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"

	"example.com/shop/platform/httpx"
)

type item struct {
	ID   uuid.UUID `json:"id"`
	Name string    `json:"name"`
	Qty  int       `json:"qty"`
}

func itemHandler(w http.ResponseWriter, r *http.Request) {
	var in item
	if p := httpx.DecodeJSON(w, r, &in); p != nil {
		httpx.WriteProblem(w, r, *p)
		return
	}
	httpx.WriteJSON(w, http.StatusCreated, in)
}

func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	r, _, _ := newTestRouter(t)
	r.Post("/items", itemHandler)
	const id = "0190b0a8-2b7e-7c4e-8d3a-0f1e2d3c4b5a"

	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
		field       string
		detail      string
	}{
		{"valid", "application/json", `{"id":"` + id + `","name":"pen","qty":2}`, 201, "", ""},
		{"charset", "application/json; charset=UTF-8", `{"name":"pen"}`, 201, "", ""},
		{"surrounding space", "application/json", " \n{\"name\":\"pen\"}\n ", 201, "", ""},
		{"no content type", "", `{"name":"pen"}`, 415, "", "application/json"},
		{"text/plain", "text/plain", `{"name":"pen"}`, 415, "", "application/json"},
		{"other charset", "application/json; charset=latin1", `{"name":"pen"}`, 415, "", ""},
		{"empty", "application/json", ``, 400, "", "empty"},
		{"blank", "application/json", "  \n", 400, "", "empty"},
		{"unknown field", "application/json", `{"name":"pen","colour":"red"}`, 400, "colour", `unknown field "colour"`},
		{"malformed", "application/json", `{"name":"pen",}`, 400, "", "byte offset 15"},
		{"truncated", "application/json", `{"name":"pen"`, 400, "", "byte offset 13"},
		{"wrong type", "application/json", `{"qty":"two"}`, 400, "qty", `field "qty" must be an integer`},
		{"wrong type uuid", "application/json", `{"id":42}`, 400, "id", `field "id" must be a string`},
		{"bad uuid", "application/json", `{"id":"nope"}`, 400, "", "invalid value"},
		{"not an object", "application/json", `[1,2]`, 400, "", "must be an object"},
		{"trailing data", "application/json", `{"name":"pen"} {"name":"ink"}`, 400, "", "single JSON value"},
		{"trailing garbage", "application/json", `{"name":"pen"}x`, 400, "", "single JSON value"},
		{"too large", "application/json", `{"name":"` + strings.Repeat("a", httpx.MaxBodyBytes) + `"}`, 413, "", "1048576"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var header []string
			if tt.contentType != "" {
				header = []string{"Content-Type", tt.contentType}
			}
			rec := do(t, r, http.MethodPost, "/items", strings.NewReader(tt.body), header...)
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d (body %s)", rec.Code, tt.status, rec.Body)
			}
			if tt.status < 400 {
				return
			}
			p := decodeProblem(t, rec)
			if p.Field != tt.field {
				t.Errorf("field = %q, want %q", p.Field, tt.field)
			}
			if !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("detail = %q, want it to contain %q", p.Detail, tt.detail)
			}
			if strings.Contains(p.Detail, "httpx_test") || strings.Contains(p.Detail, "uuid.UUID") {
				t.Errorf("detail exposes Go types: %q", p.Detail)
			}
		})
	}
}

func TestDecodeJSONLimitsBodyWithoutRouter(t *testing.T) {
	t.Parallel()
	body := `{"name":"` + strings.Repeat("a", httpx.MaxBodyBytes) + `"}`
	req := httptest.NewRequest(http.MethodPost, "/items", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	http.HandlerFunc(itemHandler).ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status = %d, want 413", rec.Code)
	}
}

func TestURLParamUUID(t *testing.T) {
	t.Parallel()
	r, _, _ := newTestRouter(t)
	r.Get("/orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, p := httpx.URLParamUUID(r, "id")
		if p != nil {
			httpx.WriteProblem(w, r, *p)
			return
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"id": id.String()})
	})

	const id = "0190b0a8-2b7e-7c4e-8d3a-0f1e2d3c4b5a"
	rec := do(t, r, http.MethodGet, "/orders/"+id, nil)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), id) {
		t.Fatalf("got %d %s", rec.Code, rec.Body)
	}
	for _, bad := range []string{"abc", "0190b0a82b7e7c4e8d3a0f1e2d3c4b5a", "{" + id + "}"} {
		rec := do(t, r, http.MethodGet, "/orders/"+bad, nil)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s: status = %d, want 400", bad, rec.Code)
			continue
		}
		p := decodeProblem(t, rec)
		if p.Field != "id" || !strings.Contains(p.Detail, `"id"`) {
			t.Errorf("%s: problem = %+v, want it to name the parameter", bad, p)
		}
	}
}

func TestWriteProblemDefaults(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/orders/1/place", nil)
	httpx.WriteProblem(rec, req, httpx.Problem{Status: http.StatusConflict, Detail: "order is not a draft"})
	p := decodeProblem(t, rec)
	want := httpx.Problem{Type: "about:blank", Title: "Conflict", Status: 409, Detail: "order is not a draft", Instance: "/orders/1/place"}
	if p != want {
		t.Errorf("problem = %+v, want %+v", p, want)
	}
	if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Error("nosniff not set")
	}
}

func TestWriteJSON(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	httpx.WriteJSON(rec, http.StatusCreated, map[string]int{"n": 1})
	if rec.Code != 201 || strings.TrimSpace(rec.Body.String()) != `{"n":1}` || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("got %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}

	rec = httptest.NewRecorder()
	httpx.WriteJSON(rec, http.StatusOK, map[string]any{"f": func() {}})
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("Content-Type") != httpx.ContentTypeProblem {
		t.Errorf("unmarshallable value: got %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if strings.Contains(rec.Body.String(), "func") {
		t.Errorf("body leaks the marshal error: %s", rec.Body)
	}
}

func TestParseUUIDAcceptsOnlyTheCanonicalForm(t *testing.T) {
	t.Parallel()
	const canonical = "0190a7c4-7c1e-7d2a-9f3b-5a8c2e1d4b6f"
	for _, s := range []string{canonical, strings.ToUpper(canonical)} {
		if id, err := httpx.ParseUUID(s); err != nil || id.String() != canonical {
			t.Errorf("ParseUUID(%q) = %v, %v", s, id, err)
		}
	}
	for _, s := range []string{"", "0190a7c47c1e7d2a9f3b5a8c2e1d4b6f", "{" + canonical + "}", "urn:uuid:" + canonical, canonical[:35] + "g"} {
		if _, err := httpx.ParseUUID(s); !errors.Is(err, httpx.ErrNotUUID) {
			t.Errorf("ParseUUID(%q) = %v, want ErrNotUUID", s, err)
		}
	}
}
