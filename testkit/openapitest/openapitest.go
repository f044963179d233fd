// Package openapitest holds an HTTP API to its OpenAPI document in tests: every route is
// documented and every documented operation routed, and every response a test receives
// from the real handler matches the document (status, headers, body schema), checked
// with kin-openapi's openapi3filter.
package openapitest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-chi/chi/v5"
)

// Load parses and validates the OpenAPI document spec (YAML or JSON), failing t when it
// is not a valid document.
func Load(t testing.TB, spec []byte) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(spec)
	if err != nil {
		t.Fatalf("load OpenAPI document: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("OpenAPI document is not valid: %v", err)
	}
	return doc
}

// Operations lists the document's operations as "METHOD /path", sorted.
func Operations(doc *openapi3.T) []string {
	var ops []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// CheckRoutes fails t unless doc documents exactly the routes of r (a router holding
// only the service's own routes), both ways.
func CheckRoutes(t testing.TB, doc *openapi3.T, r chi.Routes) {
	t.Helper()
	var routed []string
	err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed = append(routed, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(routed)
	if documented := Operations(doc); len(routed) == 0 || !slices.Equal(routed, documented) {
		t.Errorf("the OpenAPI document describes\n  %s\nthe router serves\n  %s",
			strings.Join(documented, "\n  "), strings.Join(routed, "\n  "))
	}
}

// Response is what the server answered.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Server runs a handler on a test server and checks each response it gives against the
// document. It is safe for concurrent use by parallel subtests.
type Server struct {
	doc    *openapi3.T
	srv    *httptest.Server
	router routers.Router

	mu   sync.Mutex
	seen map[string]bool // operations answered, "METHOD /path"
}

// NewServer serves h on a test server for the life of t. When t ends it fails t unless
// every operation of doc was called at least once.
func NewServer(t testing.TB, doc *openapi3.T, h http.Handler) *Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	// Route against the test server, whatever servers the document names.
	doc.Servers = openapi3.Servers{{URL: srv.URL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("route the OpenAPI document: %v", err)
	}
	s := &Server{doc: doc, srv: srv, router: router, seen: map[string]bool{}}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, op := range Operations(doc) {
			if !s.seen[op] {
				t.Errorf("no test called %s", op)
			}
		}
	})
	return s
}

// Do sends method path (path and query, such as "/orders?x=1") with header and body,
// and fails t unless the path is a documented operation and the response matches what
// the document says of that operation and status: a documented status, the documented
// headers, a documented content type and a body that matches its schema. The request
// itself is not checked, so tests can send what the document forbids.
func (s *Server) Do(t testing.TB, method, path string, header http.Header, body []byte) Response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, s.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := Response{Status: resp.StatusCode, Header: resp.Header, Body: got}

	route, params, err := s.router.FindRoute(req)
	if err != nil {
		t.Fatalf("%s %s is no documented operation: %v", method, path, err)
	}
	s.mu.Lock()
	s.seen[method+" "+route.Path] = true
	s.mu.Unlock()
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	input.SetBodyBytes(got)
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		t.Errorf("%s %s answered %d %s, which the OpenAPI document does not allow: %v",
			method, path, resp.StatusCode, got, err)
	}
	return out
}
