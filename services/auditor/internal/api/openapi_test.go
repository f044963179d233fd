package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.yaml.in/yaml/v3"

	apidoc "example.com/shop/services/auditor/api"
	"example.com/shop/services/auditor/internal/api"
)

// TestOpenAPIDocumentsEveryRoute keeps api/openapi.yaml and Routes in step: every
// route is documented and every documented operation is routed.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(apidoc.OpenAPI, &doc); err != nil {
		t.Fatalf("parse api/openapi.yaml: %v", err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
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
