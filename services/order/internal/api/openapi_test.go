package api_test

import (
	"bufio"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"example.com/shop/services/order/internal/api"
)

const openAPIPath = "../../api/openapi.yaml"

// openAPIOperations reads the "paths" section of an OpenAPI document and returns its
// operations as "METHOD /path". It reads the YAML by indentation, which is all the
// document's layout needs: path keys two spaces in, operation keys four.
func openAPIOperations(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	methods := []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}
	var (
		ops     []string
		inPaths bool
		current string
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#"):
		case !strings.HasPrefix(line, " "):
			inPaths = line == "paths:"
		case !inPaths:
		case strings.HasPrefix(line, "  /") && strings.HasSuffix(line, ":"):
			current = strings.TrimSuffix(strings.TrimSpace(line), ":")
		case strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "     "):
			key := strings.TrimSuffix(strings.TrimSpace(line), ":")
			if slices.Contains(methods, key) && current != "" {
				ops = append(ops, strings.ToUpper(key)+" "+current)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ops
}

// routeOperations lists the routes that api.API.Routes registers as "METHOD /path".
func routeOperations(t *testing.T) []string {
	t.Helper()
	r := chi.NewRouter()
	api.New(nil, nil, nil).Routes(r)
	var ops []string
	err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		ops = append(ops, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

// The OpenAPI document and routes.go describe the same operations, both ways.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	routes := routeOperations(t)
	documented := openAPIOperations(t, openAPIPath)
	if len(routes) == 0 || len(documented) == 0 {
		t.Fatalf("routes %v, documented %v: both must be non-empty", routes, documented)
	}
	for _, op := range routes {
		if !slices.Contains(documented, op) {
			t.Errorf("route %s is missing from %s", op, openAPIPath)
		}
	}
	for _, op := range documented {
		if !slices.Contains(routes, op) {
			t.Errorf("%s documents %s, which routes.go does not serve", openAPIPath, op)
		}
	}
}

func TestOpenAPIIsVersion31(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "openapi: 3.1.") {
		t.Fatalf("%s does not start with openapi: 3.1.x", openAPIPath)
	}
}
