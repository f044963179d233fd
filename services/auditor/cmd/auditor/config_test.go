package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"example.com/shop/contracts"
	"example.com/shop/platform/config"
)

// The auditor reads one database per service and one /metrics per consumer of the
// registry, under AUDITOR_<NAME>_DATABASE_URL and AUDITOR_<NAME>_METRICS_URL, and
// `auditor help serve` lists each with its default.
func TestConfigFollowsTheRegistry(t *testing.T) {
	t.Parallel()
	vars := map[string]string{}
	for _, s := range contracts.Services() {
		vars[variable(s.Name, "DATABASE_URL")] = "postgres://auditor@db-" + s.Name + "/" + s.Database
	}
	for _, c := range contracts.Consumers() {
		vars[variable(c.Name, "METRICS_URL")] = "http://" + c.Name + ":9000/metrics"
	}
	e := config.NewEnv(env(vars))
	cfg := loadServeConfig(e)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Databases) != len(contracts.Services()) || len(cfg.MetricsURLs) != len(contracts.Consumers()) {
		t.Errorf("databases %v, metrics %v: want one per service, one per consumer", cfg.Databases, cfg.MetricsURLs)
	}
	for _, s := range contracts.Services() {
		if got, want := cfg.Databases[s.Name], vars[variable(s.Name, "DATABASE_URL")]; got != want {
			t.Errorf("database of %s = %q, want %q", s.Name, got, want)
		}
	}
	for _, c := range contracts.Consumers() {
		if got, want := cfg.MetricsURLs[c.Name], vars[variable(c.Name, "METRICS_URL")]; got != want {
			t.Errorf("metrics of %s = %q, want %q", c.Name, got, want)
		}
	}

	// The names deployments set keep working.
	for _, name := range []string{"AUDITOR_ORDER_DATABASE_URL", "AUDITOR_STOCK_DATABASE_URL", "AUDITOR_SHIPPING_DATABASE_URL",
		"AUDITOR_STOCK_METRICS_URL", "AUDITOR_SHIPPING_METRICS_URL"} {
		if _, ok := vars[name]; !ok {
			t.Errorf("%s is no longer read", name)
		}
	}

	defaults := loadServeConfig(config.NewEnv(env(nil)))
	if got, want := defaults.Databases[contracts.ProducerOrder], "postgres://postgres@localhost:5432/orders?sslmode=disable"; got != want {
		t.Errorf("default order database %q, want %q", got, want)
	}
	if got, want := defaults.MetricsURLs[contracts.ConsumerStock], "http://localhost:8082/metrics"; got != want {
		t.Errorf("default stock metrics %q, want %q", got, want)
	}

	var help bytes.Buffer
	if err := run(context.Background(), []string{"auditor", "help", "serve"}, env(nil), &help, io.Discard); err != nil {
		t.Fatal(err)
	}
	for name := range vars {
		if !strings.Contains(help.String(), name) {
			t.Errorf("help serve does not list %s:\n%s", name, help.String())
		}
	}
}
