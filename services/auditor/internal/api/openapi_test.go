package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	apidoc "example.com/shop/services/auditor/api"
	"example.com/shop/services/auditor/internal/api"
	"example.com/shop/testkit/openapitest"
	"github.com/go-chi/chi/v5"
)

// TestOpenAPIDocumentsEveryRoute keeps api/openapi.yaml and Routes in step: the
// document is a valid OpenAPI document, every route is documented and every
// documented operation is routed.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	documented := openapitest.Operations(openapitest.Load(t, apidoc.OpenAPI))
	r := chi.NewRouter()
	(&api.API{}).Routes(r)
	var routed []string
	err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.ReplaceAll(route, "/*", "/{file}")
		routed = append(routed, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(documented)
	slices.Sort(routed)
	if !slices.Equal(documented, routed) {
		t.Fatalf("api/openapi.yaml documents\n  %s\nRoutes serves\n  %s", strings.Join(documented, "\n  "), strings.Join(routed, "\n  "))
	}
}
