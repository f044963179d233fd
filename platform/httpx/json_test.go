package httpx_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"example.com/shop/platform/httpx"
)

type line struct {
	ProductID uuid.UUID `json:"product_id"`
	Qty       int       `json:"qty"`
}

type item struct {
	ID    uuid.UUID `json:"id"`
	Name  string    `json:"name"`
	Qty   int       `json:"qty"`
	Lines []line    `json:"lines"`
}

func itemHandler(w http.ResponseWriter, r *http.Request) error {
	var in item
	if err := httpx.DecodeJSON(w, r, &in); err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusCreated, in)
	return nil
}

func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	r, _, _ := newTestRouter(t)
	r.Post("/items", httpx.NewErrors(nil).Handle(itemHandler))
	const id = "0190b0a8-2b7e-7c4e-8d3a-0f1e2d3c4b5a"

	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
		kind        httpx.Kind
		pointer     string // of the one field error; "-" for none
		detail      string
	}{
		{"valid", "application/json", `{"id":"` + id + `","name":"pen","qty":2,"lines":[{"product_id":"` + id + `","qty":1}]}`, 201, "", "-", ""},
		{"charset", "application/json; charset=UTF-8", `{"name":"pen"}`, 201, "", "-", ""},
		{"surrounding space", "application/json", " \n{\"name\":\"pen\"}\n ", 201, "", "-", ""},
		{"null body", "application/json", `null`, 400, httpx.KindInvalidRequest, "", "must not be null"},
		{"null string", "application/json", `{"name":null}`, 400, httpx.KindInvalidRequest, "/name", "must not be null"},
		{"null array", "application/json", `{"lines":null}`, 400, httpx.KindInvalidRequest, "/lines", "must not be null"},
		{"null line", "application/json", `{"lines":[{"qty":1},null]}`, 400, httpx.KindInvalidRequest, "/lines/1", "must not be null"},
		{"null number", "application/json", `{"lines":[{"qty":null}]}`, 400, httpx.KindInvalidRequest, "/lines/0/qty", "must not be null"},
		{"null uuid", "application/json", `{"id":null}`, 400, httpx.KindInvalidRequest, "/id", "must not be null"},
		{"no content type", "", `{"name":"pen"}`, 415, httpx.KindUnsupportedMediaType, "-", "application/json"},
		{"text/plain", "text/plain", `{"name":"pen"}`, 415, httpx.KindUnsupportedMediaType, "-", "application/json"},
		{"other charset", "application/json; charset=latin1", `{"name":"pen"}`, 415, httpx.KindUnsupportedMediaType, "-", ""},
		{"empty", "application/json", ``, 400, httpx.KindInvalidRequest, "", "empty"},
		{"blank", "application/json", "  \n", 400, httpx.KindInvalidRequest, "", "empty"},
		{"unknown member", "application/json", `{"name":"pen","colour":"red"}`, 400, httpx.KindInvalidRequest, "/colour", "unknown member"},
		{"other case", "application/json", `{"Name":"pen"}`, 400, httpx.KindInvalidRequest, "/Name", "unknown member"},
		{"unknown member in a line", "application/json", `{"lines":[{"qty":1},{"sku":"x"}]}`, 400, httpx.KindInvalidRequest, "/lines/1/sku", "unknown member"},
		{"escaped pointer", "application/json", `{"a/b~c":1}`, 400, httpx.KindInvalidRequest, "/a~1b~0c", "unknown member"},
		{"duplicate member", "application/json", `{"name":"pen","name":"ink"}`, 400, httpx.KindInvalidRequest, "/name", "twice"},
		{"duplicate member in a line", "application/json", `{"lines":[{},{"qty":1,"qty":2}]}`, 400, httpx.KindInvalidRequest, "/lines/1/qty", "twice"},
		{"malformed", "application/json", `{"name":"pen",}`, 400, httpx.KindInvalidRequest, "", "byte offset 13"},
		{"truncated", "application/json", `{"name":"pen"`, 400, httpx.KindInvalidRequest, "", "byte offset 13"},
		{"invalid UTF-8", "application/json", "{\"name\":\"\xff\"}", 400, httpx.KindInvalidRequest, "/name", "UTF-8"},
		{"wrong type", "application/json", `{"qty":"two"}`, 400, httpx.KindInvalidRequest, "/qty", "must be a number, not a string"},
		{"wrong type in a line", "application/json", `{"lines":[{"qty":1},{"product_id":42}]}`, 400, httpx.KindInvalidRequest, "/lines/1/product_id", "must be a string, not a number"},
		{"fraction for an integer", "application/json", `{"qty":1.5}`, 400, httpx.KindInvalidRequest, "/qty", "not a valid value"},
		{"lines not an array", "application/json", `{"lines":{}}`, 400, httpx.KindInvalidRequest, "/lines", "must be an array, not an object"},
		{"bad uuid", "application/json", `{"id":"nope"}`, 400, httpx.KindInvalidRequest, "/id", "not a valid value"},
		{"not an object", "application/json", `[1,2]`, 400, httpx.KindInvalidRequest, "", "must be an object, not an array"},
		{"trailing data", "application/json", `{"name":"pen"} {"name":"ink"}`, 400, httpx.KindInvalidRequest, "", "after top-level value"},
		{"trailing garbage", "application/json", `{"name":"pen"}x`, 400, httpx.KindInvalidRequest, "", "after top-level value"},
		{"too large", "application/json", `{"name":"` + strings.Repeat("a", httpx.MaxBodyBytes) + `"}`, 413, httpx.KindBodyTooLarge, "-", "1048576"},
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
			if p.Type != tt.kind.Type() {
				t.Errorf("type = %q, want %q", p.Type, tt.kind.Type())
			}
			if tt.pointer != "-" {
				if len(p.Errors) != 1 || p.Errors[0].Pointer != tt.pointer || p.Errors[0].Detail == "" {
					t.Errorf("errors = %+v, want one at pointer %q", p.Errors, tt.pointer)
				}
			}
			if tt.pointer == "" && !strings.Contains(rec.Body.String(), `{"pointer":"","detail":`) {
				t.Errorf("body %s has no whole-body locator", rec.Body)
			}
			if strings.Contains(p.Detail, "request body: ") || strings.Count(p.Detail, "request body") > 1 {
				t.Errorf("detail = %q repeats itself", p.Detail)
			}
			if !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("detail = %q, want it to contain %q", p.Detail, tt.detail)
			}
			if strings.Contains(p.Detail, "httpx_test") || strings.Contains(p.Detail, "uuid.UUID") || strings.Contains(p.Detail, "Go ") {
				t.Errorf("detail exposes Go types: %q", p.Detail)
			}
		})
	}
}

// emptyHandler answers 204 to a body DecodeEmptyJSON takes.
func emptyHandler(w http.ResponseWriter, r *http.Request) error {
	if err := httpx.DecodeEmptyJSON(w, r); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func TestDecodeEmptyJSON(t *testing.T) {
	t.Parallel()
	r, _, _ := newTestRouter(t)
	r.Post("/act", httpx.NewErrors(nil).Handle(emptyHandler))
	for _, tt := range []struct {
		name, contentType, body string
		status                  int
		pointer                 string // "-" for none
	}{
		{"no body", "", "", 204, "-"},
		{"white space", "", " \n", 204, "-"},
		{"empty object", "application/json", "{}", 204, "-"},
		{"empty object, other charset", "application/json; charset=latin1", "{}", 415, "-"},
		{"empty object, no content type", "", "{}", 415, "-"},
		{"a member", "application/json", `{"x":1}`, 400, "/x"},
		{"an array", "application/json", `[]`, 400, ""},
		{"null", "application/json", `null`, 400, ""},
		{"malformed", "application/json", `{`, 400, ""},
		{"too large", "application/json", `{"x":"` + strings.Repeat("a", httpx.MaxBodyBytes) + `"}`, 413, "-"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var header []string
			if tt.contentType != "" {
				header = []string{"Content-Type", tt.contentType}
			}
			rec := do(t, r, http.MethodPost, "/act", strings.NewReader(tt.body), header...)
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d (body %s)", rec.Code, tt.status, rec.Body)
			}
			if tt.pointer != "-" {
				if p := decodeProblem(t, rec); len(p.Errors) != 1 || p.Errors[0].Pointer != tt.pointer {
					t.Errorf("errors = %+v, want one at pointer %q", p.Errors, tt.pointer)
				}
			}
		})
	}
}

// TestDecodeJSONRefusesAContentEncoding: a body is read as sent, so one that
// says it is compressed is refused with 415 naming Content-Encoding, whether it
// is or not; identity is no encoding.
func TestDecodeJSONRefusesAContentEncoding(t *testing.T) {
	t.Parallel()
	r, _, _ := newTestRouter(t)
	r.Post("/items", httpx.NewErrors(nil).Handle(itemHandler))
	r.Post("/act", httpx.NewErrors(nil).Handle(emptyHandler))
	for _, tt := range []struct {
		path, body, encoding string
		status               int
	}{
		{"/items", `{"name":"pen"}`, "gzip", 415},
		{"/items", `{"name":"pen"}`, "identity", 201},
		{"/act", `{}`, "gzip", 415},
		{"/act", `{}`, "Identity", 204},
	} {
		rec := do(t, r, http.MethodPost, tt.path, strings.NewReader(tt.body), "Content-Type", "application/json", "Content-Encoding", tt.encoding)
		if rec.Code != tt.status {
			t.Errorf("%s with Content-Encoding %s: status = %d, want %d (body %s)", tt.path, tt.encoding, rec.Code, tt.status, rec.Body)
			continue
		}
		if tt.status == 415 {
			if p := decodeProblem(t, rec); len(p.Errors) != 1 || p.Errors[0].Header != "Content-Encoding" {
				t.Errorf("%s: errors = %+v, want one naming Content-Encoding", tt.path, p.Errors)
			}
		}
	}
}

func TestDecodeJSONLimitsBodyWithoutRouter(t *testing.T) {
	t.Parallel()
	body := `{"name":"` + strings.Repeat("a", httpx.MaxBodyBytes) + `"}`
	req := httptest.NewRequest(http.MethodPost, "/items", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	httpx.NewErrors(nil).Handle(itemHandler).ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status = %d, want 413", rec.Code)
	}
}

// FuzzDecodeJSON feeds arbitrary bodies to DecodeJSON: it never panics, it accepts a body
// only when encoding/json reads the same value from it, and every refusal is an *Error
// of a client kind whose field errors hold valid JSON Pointers.
func FuzzDecodeJSON(f *testing.F) {
	const id = "0190b0a8-2b7e-7c4e-8d3a-0f1e2d3c4b5a"
	for _, seed := range []string{
		`{"id":"` + id + `","name":"pen","qty":2,"lines":[{"product_id":"` + id + `","qty":1}]}`,
		`{"Name":"pen"}`, `{"name":"pen","name":"ink"}`, `{"lines":[{},{"sku":1}]}`,
		`{"lines":[{},{"qty":"x"}]}`, `{"qty":1e400}`, `{"a/b~":1}`, "{\"name\":\"\xff\"}",
		`{"name":"pen"} x`, `[`, ``, ` `, `null`, `{"lines":null}`, `"\ud800"`, `{"name":"\u0000"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/items", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		var got item
		err := httpx.DecodeJSON(httptest.NewRecorder(), req, &got)
		if err == nil {
			var want item
			if err := json.Unmarshal(body, &want); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("accepted %q as %+v; encoding/json reads %+v (%v)", body, got, want, err)
			}
			return
		}
		var he *httpx.Error
		if !errors.As(err, &he) {
			t.Fatalf("error %v is no *httpx.Error", err)
		}
		if !slices.Contains([]httpx.Kind{httpx.KindInvalidRequest, httpx.KindBodyTooLarge}, he.Kind) {
			t.Fatalf("kind %q for body %q", he.Kind, body)
		}
		for _, fe := range he.Errors {
			if fe.Pointer != "" && !strings.HasPrefix(fe.Pointer, "/") {
				t.Fatalf("pointer %q is no JSON Pointer", fe.Pointer)
			}
			if fe.Detail == "" {
				t.Fatalf("field error without detail: %+v", fe)
			}
		}
	})
}

func TestPathUUID(t *testing.T) {
	t.Parallel()
	r, _, _ := newTestRouter(t)
	r.Get("/orders/{id}", httpx.NewErrors(nil).Handle(func(w http.ResponseWriter, r *http.Request) error {
		id, err := httpx.PathUUID(r, "id")
		if err != nil {
			return err
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"id": id.String()})
		return nil
	}))

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
		if len(p.Errors) != 1 || p.Errors[0].Parameter != "id" || !strings.Contains(p.Detail, `"id"`) {
			t.Errorf("%s: problem = %+v, want it to name the parameter", bad, p)
		}
	}
}

func TestQueryUUID(t *testing.T) {
	t.Parallel()
	const id = "0190b0a8-2b7e-7c4e-8d3a-0f1e2d3c4b5a"
	for target, ok := range map[string]bool{
		"/r?order_id=" + id:                     true,
		"/r":                                    false,
		"/r?order_id=":                          false,
		"/r?order_id=abc":                       false,
		"/r?order_id=" + id + "&order_id=" + id: false,
		"/r?order_id=%zz":                       false,
	} {
		got, err := httpx.QueryUUID(httptest.NewRequest(http.MethodGet, target, nil), "order_id")
		var he *httpx.Error
		switch {
		case ok && (err != nil || got.String() != id):
			t.Errorf("%s: %v %v", target, got, err)
		case !ok && (!errors.As(err, &he) || he.Kind != httpx.KindInvalidRequest || len(he.Errors) != 1 || he.Errors[0].Parameter != "order_id"):
			t.Errorf("%s: error %#v, want an invalid-request error naming order_id", target, err)
		}
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
