package e2e_test

import (
	"encoding/json"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"example.com/shop/testkit"
)

// TestDashboardAndAlertsUseExportedMetrics runs the shop under its least-privilege
// roles and users with the auditor, moves one order through it, scrapes /metrics of
// the five processes, and checks that every metric named by an expression of
// deploy/prometheus/alerts.yaml and deploy/grafana/shop.json is one they export (a
// histogram's _bucket, _sum and _count included): a renamed metric cannot silently
// blank a panel or an alert.
func TestDashboardAndAlertsUseExportedMetrics(t *testing.T) {
	t.Parallel()
	used := map[string][]string{} // metric -> where
	for _, e := range alertExprs(t) {
		for _, m := range metricNames(t, e.expr) {
			used[m] = append(used[m], e.where)
		}
	}
	for _, e := range dashboardExprs(t) {
		for _, m := range metricNames(t, e.expr) {
			used[m] = append(used[m], e.where)
		}
	}
	if len(used) < 15 {
		t.Fatalf("only %d metrics found in the alerts and the dashboard", len(used))
	}

	s := newShop(t, options{auditor: true, env: auditorEnv()}) // the auditor exports delivery_*
	ctx := testkit.Context(t)
	o := s.createOrder(ctx, 1)
	s.place(ctx, o.ID, http.StatusOK)
	s.waitReserved(ctx, o)
	s.waitShipping(ctx, o.ID, "confirmed", 3, "ready")

	exported := map[string]model.MetricType{}
	for _, p := range s.sys.All() {
		resp, err := http.Get("http://" + p.Addr + "/metrics")
		if err != nil {
			t.Fatalf("%s /metrics: %v", p.Name, err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s /metrics: %v", p.Name, err)
		}
		for name, f := range families {
			exported[name] = model.MetricType(f.GetType())
		}
	}
	var missing []string
	for m, where := range used {
		if _, ok := exported[m]; ok {
			continue
		}
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if base != m {
			if _, ok := exported[base]; ok {
				continue
			}
		}
		missing = append(missing, m+" (used by "+strings.Join(where, ", ")+")")
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("not exported by any process: %s", m)
	}
}

type expr struct{ where, expr string }

func alertExprs(t *testing.T) []expr {
	t.Helper()
	raw, err := os.ReadFile("../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	var out []expr
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, expr{"alert " + r.Alert, r.Expr})
		}
	}
	return out
}

func dashboardExprs(t *testing.T) []expr {
	t.Helper()
	raw, err := os.ReadFile("../deploy/grafana/shop.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("shop.json: %v", err)
	}
	var out []expr
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out = append(out, expr{"panel " + p.Title, tg.Expr})
		}
	}
	return out
}

// metricNames parses a PromQL expression and returns the metric name of each of its
// vector and matrix selectors.
func metricNames(t *testing.T, q string) []string {
	t.Helper()
	e, err := parser.ParseExpr(q)
	if err != nil {
		t.Fatalf("%q: %v", q, err)
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}
