package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"example.com/shop/e2e/internal/bench"
	"example.com/shop/e2e/internal/system"
)

// zeroIsAResult names the measurements whose zero is a finding, not a
// broken measurement: no rate kept p99 under 100 ms; no order out of order.
var zeroIsAResult = map[string]bool{
	"latency_max_rate_reservation_p99_under_100ms": true,
	"latency_max_rate_confirmed_p99_under_100ms":   true,
	"relay_order_violations":                       true,
}

// TestQuickRun runs `bench -quick` end to end on the real servers and the
// real binaries, so that the bench cannot rot: every measurement must be in
// latest.json with a positive value (zero where zero is a finding), and the
// chart must be drawn. It
// asserts nothing about speed.
func TestQuickRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	binDir := filepath.Join(t.TempDir(), "bin")
	if err := system.Build(ctx, binDir, false); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-quick", "-bin", binDir, "-out", out}, os.Getenv, &stdout, &stderr)
	t.Log(stdout.String())
	if err != nil {
		t.Fatalf("bench -quick: %v\n%s", err, stderr.String())
	}

	raw, err := os.ReadFile(filepath.Join(out, "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var results []bench.Result
	if err := json.Unmarshal(raw, &results); err != nil {
		t.Fatalf("latest.json: %v\n%s", err, raw)
	}
	got := map[string]bench.Result{}
	for _, r := range results {
		got[r.Name] = r
	}
	sizes := bench.QuickSizes()
	required := 0
	for _, name := range bench.Names(sizes) {
		r, ok := got[name]
		optional := bench.Optional(sizes, name)
		if !optional {
			required++
		}
		switch {
		case !ok && optional:
			// Measured only for the rates the maxrate search reached.
		case !ok:
			t.Errorf("latest.json has no %s", name)
		case optional && r.Value < 0:
			t.Errorf("%s = %v %s, want zero or more", name, r.Value, r.Unit)
		case optional && r.Unit == "":
			t.Errorf("%s has no unit", name)
		case optional:
		case name == "relay_order_violations" && r.Value != 0:
			// A count of orders whose events reached the queue out of order.
			t.Errorf("%s = %v: the relay broke the order of an order's events", name, r.Value)
		case zeroIsAResult[name] && r.Value < 0:
			t.Errorf("%s = %v %s, want zero or more", name, r.Value, r.Unit)
		case !zeroIsAResult[name] && !(r.Value > 0):
			t.Errorf("%s = %v %s, want a positive value", name, r.Value, r.Unit)
		case r.Unit == "":
			t.Errorf("%s has no unit", name)
		case r.Baseline != "" && (r.Ratio == nil || !(*r.Ratio > 0)):
			t.Errorf("%s has baseline %s but ratio %v", name, r.Baseline, r.Ratio)
		}
	}
	if len(results) < required || len(results) > len(bench.Names(sizes)) {
		t.Errorf("latest.json has %d results, want %d to %d", len(results), required, len(bench.Names(sizes)))
	}
	// The first rate of the search always runs: its CPU shares must be there,
	// and the shop cannot have used no CPU at all.
	first := fmt.Sprintf("maxrate_%d_", sizes.MaxRates[0])
	if r, ok := got[first+"cpu_shop"]; !ok || !(r.Value > 0) {
		t.Errorf("%scpu_shop = %v (present %v), want a positive CPU time per order", first, r.Value, ok)
	}

	svg, err := os.ReadFile(filepath.Join(out, "chart.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "relay, 1 partition(s), 1 process(es)") {
		t.Errorf("chart.svg does not look like the bench chart:\n%.300s", svg)
	}
}
